"""Whether `zoo ablate` may train one arm now: its folder's lease (zoo.run.lock), `--fresh`, and the
fingerprint rule (zoo.run.fingerprint), checked under the lease so two processes never train one arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import filelock

from zoo.config.run import RunConfig
from zoo.config.variant import VariantError
from zoo.run import fingerprint, lock
from zoo.run.tracking import read_json


def claim(
    label: str, cfg: RunConfig, console: Any, fresh: bool = False, study_file: str | None = None
) -> tuple[filelock.SoftFileLease | None, str]:
    """(lease, action) for the arm `label` trained with `cfg` in `cfg.out_dir()`.

    The lease is held (release it when done) for action "train" (new, resumed, or `fresh`: its
    results deleted first) and "continue" (budget.steps grew under a constant schedule); for the
    others it is None and the arm is skipped: "finished" (same fingerprint), "locked" (another
    process or thread holds the lease), "stale" (trained with another config since the plan was
    checked). An arm whose lease another process holds is said "finished" when its folder already
    holds this config's finished run and it is not `fresh` (that process only looks at it, or is
    closing it), and "in use" only otherwise. Each decision is printed on `console`."""
    d = Path(cfg.out_dir())
    lease = lock.acquire(d / lock.LOCK_NAME)
    if lease is None and not fresh and finished_run(d, cfg):
        console.print(f"[green]skip[/] {label}: finished", highlight=False)
        return None, "finished"
    if lease is None and not (d / lock.LOCK_NAME).exists():  # released since the try: try once more
        lease = lock.acquire(d / lock.LOCK_NAME)
    if lease is None:
        console.print(f"[yellow]skip[/] {label}: in use by {lock.holder(d / lock.LOCK_NAME)}", highlight=False)
        return None, "locked"
    try:
        if fresh:
            fingerprint.clear_results(d)
            (d / "metrics.jsonl").unlink(missing_ok=True)
        reuse = fingerprint.check_reuse(d, cfg, fingerprint.ablate_hint(study_file, label))
    except fingerprint.StaleRunError as e:
        lease.release()
        console.print(f"[red]refused[/] {label}: {e}", highlight=False)
        return None, "stale"
    except BaseException:
        lease.release()
        raise
    if reuse == "same" and read_json(d / "summary.json").get("status") == "finished":
        lease.release()
        console.print(f"[green]skip[/] {label}: finished", highlight=False)
        return None, "finished"
    if reuse in ("new", "grown"):  # what the folder trains from now on (the trainer writes the same)
        fingerprint.write_record(d, cfg)
    if reuse == "grown":
        console.print(f"[bold]continue[/] {label} to {cfg.budget.steps} steps", highlight=False)
    return lease, "continue" if reuse == "grown" else "train"


def finished_run(d: Path, cfg: RunConfig) -> bool:
    """Whether the folder `d` holds a finished run of `cfg`, read without its lease: summary.json says
    finished at `cfg.budget.steps` or beyond (a run continued to a grown budget is not yet) and the
    fingerprint record is this config's."""
    summ = read_json(d / "summary.json")
    steps = summ.get("steps", cfg.budget.steps)
    if summ.get("status") != "finished" or not isinstance(steps, (int, float)) or steps < cfg.budget.steps:
        return False
    try:
        return fingerprint.check_reuse(d, cfg, "") == "same"
    except VariantError:  # StaleRunError included: another config's results are not this arm's
        return False


def plan_conflicts(all_arms: list[Any], arms: list[Any], study_file: str, fresh: tuple[str, ...] = ()) -> list[str]:
    """One StaleRunError message per arm of `arms` (experiment.Arm) whose folder holds results of
    another config, leaving out arms whose label or group (label without -s<seed>) is in `fresh`.

    Raises VariantError when a `fresh` name is no arm of `all_arms` (listing the arms)."""
    known = {a.label for a in all_arms} | {a.group for a in all_arms}
    unknown = sorted(set(fresh) - known)
    if unknown:
        raise VariantError(
            f"--fresh {', '.join(unknown)}: no such arm in {study_file}; arms: {', '.join(sorted(known))}"
        )
    out = []
    for a in arms:
        if a.label in fresh or a.group in fresh:
            continue
        try:
            fingerprint.check_reuse(a.config.out_dir(), a.config, fingerprint.ablate_hint(study_file, a.label))
        except fingerprint.StaleRunError as e:
            out.append(str(e))
    return out
