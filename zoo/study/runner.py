"""Running a study's arms here, one after another (`zoo ablate`): plan, shard, claim, train, record,
report. `run_study(..., run_arms=...)` hands the claimed-and-train part to another executor:
zoo.study.ray_runner runs each arm as a Ray task."""

from __future__ import annotations

import json
import os
import re
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from zoo.config.variant import VariantError
from zoo.run import lock
from zoo.run.tracking import read_json
from zoo.study import report
from zoo.study.arm_claim import claim, plan_conflicts
from zoo.study.experiment import Arm, Study, expand_arms, fmt_value
from zoo.study.study_checks import foreign_arm_dir, shared_set_overrides
from zoo.study.validate import check_arms


def arm_status(run_dir: Path) -> tuple[str, str | None]:
    """(status, error) of an arm folder: finished | failed | interrupted (Ctrl-C / SIGTERM; a re-run
    resumes it) | unfinished (has metrics: running, or killed) | pending."""
    summ = read_summary(run_dir)
    if summ.get("status") in ("finished", "failed", "interrupted"):
        return summ["status"], summ.get("error")
    return ("unfinished" if (run_dir / "metrics.jsonl").exists() else "pending"), None


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json of an arm ({} if missing or unreadable)."""
    return read_json(Path(run_dir) / "summary.json")


def write_arm_config(arm: Arm) -> Path:
    """Write the arm's resolved RunConfig to `<arm dir>/config.yaml` (runnable with `zoo run`)."""
    out = arm.config.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(arm.config.model_dump(mode="json"), sort_keys=False))
    return path


def _write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a per-process temp file, then rename: shards may write concurrently)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def write_index(st: Study, arms: list[Arm]) -> Path:
    """`<study dir>/study.json`: every arm (all shards) with variant, seed, status, error and paths,
    read from the arms' folders at the time of writing (so shards may write it concurrently)."""
    rows = []
    for a in arms:
        d = a.config.out_dir()
        status, error = arm_status(d)
        rows.append(
            {
                "label": a.label,
                "arm": a.group,
                "base": a.base,
                "variant": a.config.variant,
                "seed": a.seed,
                "sweep": a.sweep,
                "set": a.overrides,
                "status": status,
                "error": error,
                "dir": str(d),
                "config": str(d / "config.yaml"),
                "metrics": str(d / "metrics.jsonl"),
                "summary": str(d / "summary.json"),
            }
        )
    path = st.study_dir() / "study.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with lock.locked(st.study_dir() / ".study.lock", what=f"study index {path}", wait=30.0):
        _write_json(
            path,
            {
                "name": st.name,
                "file": st.path,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "baseline": st.baseline or (arms[0].group if arms else None),
                "arms": rows,
            },
        )
    return path


def select_shard(arms: list[Arm], shard: tuple[int, int] | None) -> list[Arm]:
    """Arms i, i+n, i+2n, ... of the arms sorted by label (0-based i). Raises VariantError on a bad shard."""
    ordered = sorted(arms, key=lambda a: a.label)
    if shard is None:
        return ordered
    i, n = shard
    if n < 1 or not 0 <= i < n:
        raise VariantError(f"--shard {i}/{n}: need 0 <= i < n (e.g. --shard 0/2 and --shard 1/2)")
    return ordered[i::n]


def parse_shard(text: str) -> tuple[int, int]:
    """ "1/4" -> (1, 4). Raises VariantError on anything else."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise VariantError(f"--shard {text!r}: expected i/n, e.g. 0/2")
    shard = int(m.group(1)), int(m.group(2))
    select_shard([], shard)
    return shard


def _key_overrides(arm: Arm) -> str:
    parts = [f"{k}={fmt_value(v)}" for k, v in arm.overrides.items()]
    parts += [f"{k}={fmt_value(v)}" for k, v in arm.sweep.items() if k not in arm.overrides]
    return ", ".join(parts) or "-"


def plan_status(a: Arm, fresh: tuple[str, ...] = ()) -> str:
    """The plan's status of an arm: its folder's (`arm_status`), and for results already there what a
    run would do with them: retrain (--fresh), continue to a grown `budget.steps`, or refuse."""
    from zoo.run import fingerprint

    status = arm_status(a.config.out_dir())[0]
    if status == "pending":
        return status
    if a.label in fresh or a.group in fresh:
        return f"{status}: retrained (--fresh)"
    try:
        reuse = fingerprint.check_reuse(a.config.out_dir(), a.config, "")
    except VariantError:  # StaleRunError included: listed below the table as "would refuse"
        return f"{status}: config changed, would refuse"
    if reuse == "grown":
        return f"{status}: continues to step {a.config.budget.steps}"
    return status


def print_plan(st: Study, arms: list[Arm], console: Any, total: int, fresh: tuple[str, ...] = ()) -> None:
    """A rich table of the arms to run: arm, variant, seed, key overrides, status (`plan_status`)."""
    from rich.table import Table

    t = Table(title=f"study {st.name}: {len(arms)} of {total} arm(s) -> {st.study_dir()}")
    for col in ("arm", "variant", "seed", "overrides", "status"):
        t.add_column(col)
    for a in arms:
        t.add_row(a.label, a.config.variant, str(a.seed), _key_overrides(a), plan_status(a, fresh))
    console.print(t)


def run_command(config_path: Path) -> str:
    """The shell command that runs (or resumes) one arm from its written config."""
    import shlex

    return shlex.join(["zoo", "run", str(config_path)])


def run_study(
    st: Study,
    *,
    dry_run: bool = False,
    write_configs: bool = False,
    shard: tuple[int, int] | None = None,
    train_fn: Callable[..., Any] | None = None,
    console: Any = None,
    fresh: tuple[str, ...] = (),
    run_arms: Callable[..., Mapping[str, str]] | None = None,
) -> int:
    """Run (or with dry_run only plan) a study's arms; see zoo.study.experiment's module doc.

    Every arm's variant is checked before anything runs (VariantError lists all problems). Each
    arm's config.yaml is written before it trains. A dry run checks and prints the plan and writes
    nothing; with `write_configs` it writes each arm's config.yaml and prints the `zoo run` command
    for each. An arm folder holding results of another config (see
    zoo.run.fingerprint) is an error naming the changed keys, raised before anything runs, unless the
    arm's label or group is in `fresh` (its results are then deleted and it is retrained). Finished
    arms with the same fingerprint are skipped, arms whose lease another process holds
    (zoo.run.lock) are skipped and said so, others run with `train_fn(cfg, resume=True)` (default
    `zoo.run.trainer.train`). An arm that raises is recorded in its summary.json (status failed, error,
    traceback tail) and the study goes on. Writes study.json (under the study's lease), then
    report.md (`zoo.study.report.write_report`). Returns 0 iff every selected arm finished (dry run: 0 when
    the plan is valid). `run_arms(arms, train_fn=, fresh=, study_file=, console=)` -> {label: status}
    replaces the one-after-another loop (each arm through `run_arm`, e.g. as a Ray task); train_fn
    is then passed as given (None: the executor's default, `zoo.run.trainer.train`)."""
    from rich.console import Console

    console = console or Console()
    all_arms, arms = _planned_arms(st, shard, console, local_memory=run_arms is None)  # Ray arms run elsewhere
    conflicts = plan_conflicts(all_arms, arms, st.path or str(st.name), fresh)
    print_plan(st, arms, console, len(all_arms), fresh)
    if conflicts and not dry_run:
        raise VariantError("\n".join(conflicts))
    for c in conflicts:
        console.print(f"[yellow]would refuse:[/] {c}", highlight=False, soft_wrap=True)
    if dry_run:
        _dry_run(st, arms, console, write_configs)
        return 0
    write_index(st, all_arms)
    if run_arms is not None:
        try:
            results = dict(run_arms(arms, train_fn=train_fn, fresh=fresh, study_file=st.path, console=console))
        finally:
            write_index(st, all_arms)
    else:
        results = _run_here(st, all_arms, arms, train_fn or _default_train(), console, fresh)
    _final_report(st, console)
    return _summarise(st, arms, results, console)


def _planned_arms(
    st: Study, shard: tuple[int, int] | None, console: Any, local_memory: bool
) -> tuple[list[Arm], list[Arm]]:
    """(every arm of the study, this shard's arms), after the arms' checks (warnings printed) and the
    check that no arm folder belongs to another study. Raises VariantError listing the problems."""
    all_arms = expand_arms(st)
    rep = check_arms(all_arms, st.plugins, local_memory=local_memory)
    if not rep.ok:
        raise VariantError("\n".join(rep.errors))
    for w in rep.warnings + shared_set_overrides(st):
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    arms = select_shard(all_arms, shard)
    foreign = [why for a in arms if (why := foreign_arm_dir(st.study_dir(), a.config.out_dir(), str(st.name)))]
    if foreign:
        raise VariantError(
            "\n".join(
                f"{why}: not this study's arm; move it away or give the study another output_dir" for why in foreign
            )
        )
    return all_arms, arms


def _dry_run(st: Study, arms: list[Arm], console: Any, write_configs: bool) -> None:
    """A dry run after the plan: nothing written (said so), or with `write_configs` each arm's
    config.yaml written and its `zoo run` command printed."""
    if not write_configs:
        console.print(
            f"dry run: nothing written; add --write-configs to write each arm's config.yaml under "
            f"{st.study_dir()}/<arm>/ and print the `zoo run` command for each",
            highlight=False,
            soft_wrap=True,
        )
    for a in arms if write_configs else ():
        console.print(run_command(write_arm_config(a)), highlight=False, soft_wrap=True)


def _run_here(
    st: Study, all_arms: list[Arm], arms: list[Arm], train_fn: Callable[..., Any], console: Any, fresh: tuple[str, ...]
) -> dict[str, str]:
    """The arms one after another in this process (`_run_arm`) -> {label: final status}; study.json
    rewritten after each arm, also on Ctrl-C (which names the --fresh arms not reached)."""
    results = {}
    for i, a in enumerate(arms):
        try:
            results[a.label] = _run_arm(
                a, train_fn, console, fresh=a.label in fresh or a.group in fresh, study_file=st.path
            )
        except KeyboardInterrupt as e:  # the resume command must still retrain the --fresh arms not reached
            e.pending_fresh = [b.label for b in arms[i + 1 :] if b.label in fresh or b.group in fresh]  # type: ignore[attr-defined]
            raise
        finally:  # also on Ctrl-C: study.json then shows the arm interrupted, not pending
            write_index(st, all_arms)
    return results


def _summarise(st: Study, arms: list[Arm], results: Mapping[str, str], console: Any) -> int:
    """Print how many arms finished; 0 iff all did. An arm skipped because another process held it
    counts as finished when that process has finished it by now (two `zoo ablate` of one study: the
    last to end reports every arm)."""
    dirs = {a.label: a.config.out_dir() for a in arms}
    results = {
        k: ("finished" if s == "locked" and k in dirs and arm_status(dirs[k])[0] == "finished" else s)
        for k, s in results.items()
    }
    bad = [k + (_locked_note(dirs.get(k)) if s == "locked" else "") for k, s in results.items() if s != "finished"]
    console.print(
        f"study {st.name}: {len(arms) - len(bad)}/{len(arms)} arm(s) finished"
        + (f"; not finished: {', '.join(bad)}" if bad else ""),
        highlight=False,
    )
    return 0 if not bad else 1


def _locked_note(d: Path | None) -> str:
    """Why an arm another process held is not finished: that process still holds it (it writes the
    report when it ends), or it ended without finishing it (its lease is free now: a dead process on
    this host is recognised by its pid, one elsewhere by a marker not renewed for the lease's ttl)."""
    path = None if d is None else Path(d) / lock.LOCK_NAME
    try:
        held = path is not None and time.time() - os.stat(path).st_mtime < lock.DEFAULT_TTL
    except OSError:  # released
        held = False
    if held and (lease := lock.acquire(path)) is not None:  # its holder died: the lease was free
        lease.release()
        held = False
    if held:
        return " (in use by another process, which writes the study's report when it ends)"
    return " (the process that held it ended without finishing it: run zoo ablate again to resume it)"


def _default_train() -> Callable[..., Any]:
    from zoo.run import trainer

    return trainer.train


def run_arm(
    arm: Arm, train_fn: Callable[..., Any] | None, console: Any, fresh: bool = False, study_file: str | None = None
) -> str:
    """Claim, train and record one arm as `zoo ablate` does (zoo.study.arm_claim: skipped when finished
    with the same fingerprint or leased by another process); returns its final status (finished,
    failed, interrupted, locked, stale). train_fn None: `zoo.run.trainer.train`. An exception in training
    is recorded in the arm's summary.json (status failed) and not raised."""
    return _run_arm(arm, train_fn or _default_train(), console, fresh, study_file)


def record_failure(run_dir: Path, e: BaseException) -> None:
    """Mark the arm in `run_dir` failed in its summary.json with `e` (e.g. a cluster task that died)."""
    _record_failure(Path(run_dir), e)


def _run_arm(
    arm: Arm, train_fn: Callable[..., Any], console: Any, fresh: bool = False, study_file: str | None = None
) -> str:
    """Run one arm unless zoo.study.arm_claim skips it (finished with the same fingerprint, or "locked" by
    another process); returns its final status. Exceptions become status failed."""
    lease, action = claim(arm.label, arm.config, console, fresh, study_file)
    if lease is None:
        return action
    try:
        return _train_arm(arm, train_fn, console)
    finally:
        lease.release()


def _train_arm(arm: Arm, train_fn: Callable[..., Any], console: Any) -> str:
    """Train (or resume) one claimed arm; returns its final status. Exceptions become status failed."""
    d = arm.config.out_dir()
    status, _ = arm_status(d)
    write_arm_config(arm)
    console.print(
        f"[bold]run[/] {arm.label}" + (" (resuming)" if status in ("unfinished", "failed", "interrupted") else ""),
        highlight=False,
    )
    try:
        result = train_fn(arm.config, resume=True)
    except KeyboardInterrupt as e:  # the study stops; the arm is recorded as interrupted (resumable)
        if arm_status(d)[0] != "interrupted":  # interrupted before the trainer could say so (e.g. loading)
            _record_failure(d, e, status="interrupted")
        raise
    except Exception as e:  # noqa: BLE001 - the study goes on
        _record_failure(d, e)
        console.print(f"[red]failed[/] {arm.label}: {type(e).__name__}: {e}", highlight=False)
        return "failed"
    status, error = arm_status(d)
    if status not in ("finished", "failed"):  # a train_fn that returns without writing summary.json
        summ = dict(result) if isinstance(result, Mapping) else {}
        summ.setdefault("status", "finished")
        _write_json(d / "summary.json", summ)
        status, error = arm_status(d)
    if status == "failed":
        console.print(f"[red]failed[/] {arm.label}: {error}", highlight=False)
    return status


def _record_failure(run_dir: Path, e: BaseException, status: str = "failed") -> None:
    """Mark summary.json `status` (failed, or interrupted) with the error and the last lines of the
    traceback (keeps other keys)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    summ = read_summary(run_dir)
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    summ.update(status=status, error=f"{type(e).__name__}: {e}", traceback="".join(tb)[-4000:])
    _write_json(run_dir / "summary.json", summ)


def _final_report(st: Study, console: Any) -> None:
    """report.md for the study and a one-row-per-arm table on the console (the full tables are in
    report.md, whose path is printed); a report problem is printed, never fatal for the study."""
    try:
        path = report.write_report(st.study_dir(), console=console, summary_only=True)
        console.print(
            f"report: {path} (every metric, statistics over seeds, comparisons with the baseline, plots; "
            f"`zoo report {st.study_dir()}` prints its tables)",
            highlight=False,
            soft_wrap=True,
        )
    except Exception as e:  # noqa: BLE001
        console.print(f"[yellow]warning:[/] report failed: {type(e).__name__}: {e}", highlight=False)
