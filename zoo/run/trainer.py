"""`zoo run`: train one variant on one model and task, with checkpoints a restart resumes from.

    summary = train(load_run_config("run.yaml"))  # zoo.study.run_file

Writes `cfg.out_dir()/{config.yaml, metrics.jsonl, samples.jsonl, summary.json, checkpoint/}`.
The step itself is `zoo.step.pipeline.step`; building the run (models, data, optimizers) is `zoo.run.setup`;
this module sets up tracking, runs the loop, and evaluates before and after. What of the run state a
checkpoint holds is `zoo.run.checkpoint`; the evaluator and the progress bar are `zoo.run.progress`.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import yaml

from zoo.backends.train import checkpoint as ckpt
from zoo.backends.train.memory import reset_peak_memory
from zoo.config.run import RunConfig, WandbOpts
from zoo.config.variant import Variant
from zoo.core import dist, guards
from zoo.core.faults import WriteError, say_unrecorded, with_last_checkpoint, write_guard
from zoo.rewards.session import close_rewards
from zoo.run.checkpoint import restore_checkpoint, save_checkpoint
from zoo.run.jsonl import missing_step_record, read_jsonl
from zoo.run.progress import evaluator, progress_bar
from zoo.run.provenance import batch_size_warnings
from zoo.run.setup import setup, validate_run
from zoo.run.tracking import read_json
from zoo.step import pipeline
from zoo.step.types import RunState

__all__ = ["close_generator", "resolved_config", "setup", "train", "validate_run"]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the run folder


def _make_run_folder(cfg: RunConfig) -> None:
    """Create the run folder, or raise WriteError (an OSError) naming it and the key that sets it (output_dir or name)."""
    out = cfg.out_dir()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        key = f"output_dir {cfg.output_dir!r}" if cfg.output_dir else f"name {cfg.name!r} (runs/<name>)"
        raise WriteError(
            f"cannot create the run folder {out} ({e.strerror or e}): {key} must name a folder this "
            "process can create and write; set another with --set output_dir=DIR",
            e.errno,
            str(out),
        ) from None


def close_generator(gen: Any) -> None:
    """Shut down a generator that holds an engine (`close()`, e.g. vllm's) and collect it, so a study's
    next arm in this process does not hold two engines; a generator without `close` is left alone."""
    close = getattr(gen, "close", None)
    if callable(close):
        close()
        import gc

        gc.collect()


def _recorded_provenance(out: Path) -> dict[str, Any] | None:
    """The provenance the run folder's config.yaml recorded (None: no readable record)."""
    try:
        rec = yaml.safe_load((out / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return rec.get("provenance") if isinstance(rec, dict) else None


# --------------------------------------------------------------------------- the loop


def resolved_config(st: RunState) -> dict[str, Any]:
    cfg = st.cfg.model_dump(mode="json")
    cfg["resolved_variant"] = {
        "name": st.variant.name,
        "paper": st.variant.paper,
        "group_size": st.variant.group_size,
        "updates": st.variant.updates.model_dump(),
        "critic_warmup": st.variant.critic_warmup,
        "slots": st.variant.resolved({"max_new_tokens": st.cfg.budget.max_new_tokens}),
    }
    cfg["provenance"] = st.provenance
    return cfg


def train(
    cfg: RunConfig,
    resume: bool = True,
    *,
    progress: bool = True,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
    fresh_hint: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) one arm to the end. Returns the summary also written to summary.json.

    Rank 0 holds the run folder's lease (zoo.run.lock) throughout: raises zoo.run.lock.LockedError naming the
    holder when another process trains it. A folder with results of another config is refused
    (zoo.run.fingerprint.check_reuse: StaleRunError naming the changed keys, ending with `fresh_hint`);
    `resume=False` (`--fresh`) deletes its checkpoint and summary first. A failure after setup writes
    summary.json with status "failed" and re-raises; the last checkpoint stays, and calling `train`
    again resumes from it. Set `ZOO_FAIL_AT_STEP=k` to simulate a crash after step k (tests). A failed
    write (disk full, read-only) is re-raised as one WriteError naming the file and the last good
    checkpoint's step; a damaged or unsafe checkpoint raises CheckpointError before any step
    (zoo.backends.train.checkpoint.load). The guards (zoo/core/guards.py, `cfg.guards`) raise `guards.RunFailed` for a
    run that cannot learn: rewards that cannot score most rows, every optimizer step skipped for
    non-finite values, non-finite weights (never checkpointed), or no optimizer step in the run."""
    from zoo.run import lock

    dist.init_from_env()  # under a launcher join the group first: only rank 0 takes the lease
    if dist.rank() != 0:
        return _train(cfg, resume, progress=progress, on_step=on_step, fresh_hint=fresh_hint)
    checked = validate_run(cfg)  # before the run folder is made or read: refused as `zoo validate` refuses it
    _make_run_folder(cfg)
    with lock.locked(cfg.out_dir() / lock.LOCK_NAME, what=f"run folder {cfg.out_dir()}"):
        return _train(cfg, resume, progress=progress, on_step=on_step, fresh_hint=fresh_hint, checked=checked)


def _train(
    cfg: RunConfig,
    resume: bool,
    *,
    progress: bool,
    on_step: Callable[[int, dict[str, Any]], None] | None,
    fresh_hint: str | None,
    checked: tuple[Variant, list[str]] | None = None,
) -> dict[str, Any]:
    from zoo.run import fingerprint as fp
    from zoo.run.tracking import Tracker

    if checked is None:  # ranks other than 0 check here (rank 0 did before taking the lease)
        checked = validate_run(cfg)
    out = cfg.out_dir()
    other = "--set output_dir=NEW_DIR" if cfg.output_dir else "--set name=NEW"  # name does not move an output_dir
    reuse = (
        fp.check_reuse(
            out,
            cfg,
            fresh_hint=fresh_hint
            or f"add --fresh to retrain it with this config (its results are deleted), or write it elsewhere ({other})",
        )
        if resume
        else "new"
    )
    if not resume and dist.rank() == 0:
        fp.clear_results(out)
    done = _finished_summary(out, cfg) if reuse == "same" else None
    if done is not None:
        log.warning("%s already finished %d steps; nothing to do (use --fresh to train again)", out, done["steps"])
        return done
    out.mkdir(parents=True, exist_ok=True)
    reset_peak_memory(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    st = setup(cfg, checked=checked)
    main = dist.rank() == 0
    state = ckpt.load(out / "checkpoint") if resume else None
    if state is not None:
        with ckpt.restoring(out / "checkpoint" / ckpt.FILE):
            restore_checkpoint(st, state, out / "checkpoint")
        if gap := missing_step_record(out / "metrics.jsonl", st.step):  # every rank: the same file
            raise ckpt.CheckpointError(gap)
        log.warning("resuming %s from its checkpoint at step %d of %d", out, st.step, cfg.budget.steps)
        for w in batch_size_warnings(_recorded_provenance(out), st.provenance) if main else ():
            log.warning(w)
    elif main:
        ckpt.clear(out / "checkpoint")  # a fresh start: an older run's checkpoint must not become state.prev.pt
    saved_step = st.step if state is not None else None  # the last good checkpoint (for a write error's message)
    rcfg = resolved_config(st)
    rcfg["fingerprint"] = fp.write_record(out, cfg) if main else dict(zip(("digest", "fields"), fp.fingerprint(cfg)))
    if main:
        with write_guard(out / "config.yaml"):
            (out / "config.yaml").write_text(yaml.safe_dump(rcfg, sort_keys=False))
    tracker = (
        Tracker.for_run(
            cfg,
            config=rcfg,
            resolved_slots=rcfg["resolved_variant"]["slots"],
            resume_id=state.get("tracker_id") if state else None,
        )
        if main
        else _NullTracker()
    )
    if main:  # records past the checkpoint (or all of them on a fresh start) belong to a lost run
        tracker.truncate_after(st.step if state is not None else -1)
    summary: dict[str, Any] = (
        {k: v for k, v in read_json(out / "summary.json").items() if k.startswith("eval/before")}
        if state is not None
        else {}
    )
    summary.update(fingerprint=rcfg["fingerprint"]["digest"], fingerprint_fields=rcfg["fingerprint"]["fields"])
    fail_at = int(os.environ.get("ZOO_FAIL_AT_STEP", "0") or 0)
    try:
        evaluate_run = evaluator(st, announce=progress and main)
        if st.step == 0 and "eval/before" not in summary:
            summary["eval/before"] = evaluate_run()
            if summary["eval/before"]:
                tracker.log({**summary["eval/before"], "eval/phase": 0.0}, step=0)
            # persisted now: a run killed (kill -9) before it writes its final summary keeps it for the resume
            _write_summary(out, {**summary, "status": "running", "steps": 0})
        last: dict[str, Any] = {}
        with progress_bar(progress and main, cfg.budget.steps, st.step) as bar:
            while st.step < cfg.budget.steps:
                res = pipeline.step(st)
                m, samples = res.metrics, res.samples
                tracker.log(m, step=st.step)
                guards.after_run_step(st, m)  # metrics reduced over ranks: all agree
                guards.check_finite_weights(st.models, st.step, saved_step)
                every = (cfg.tracking.wandb_opts() or WandbOpts()).table_every
                if samples and (st.step % every == 0 or st.step == 1):
                    tracker.log_samples(st.step, samples[:16])
                if cfg.eval.every and st.step % cfg.eval.every == 0 and st.step < cfg.budget.steps:
                    tracker.log(evaluate_run(), step=st.step)
                if st.step % cfg.checkpoint.every == 0 or st.step == cfg.budget.steps:
                    save_checkpoint(st, out, tracker.run_id)
                    saved_step = st.step
                last = m
                bar(st.step, m)
                if on_step:
                    on_step(st.step, m)
                if fail_at and st.step == fail_at:
                    raise RuntimeError(f"ZOO_FAIL_AT_STEP={fail_at}: simulated crash")
        guards.at_end(st.guard, st.step)
        if not last and st.step:  # resumed after its last step: that step's metrics are in metrics.jsonl
            last = _last_step_metrics(out, st.step)
        summary["eval/after"] = evaluate_run()
        if summary["eval/after"]:
            tracker.log({**summary["eval/after"], "eval/phase": 1.0}, step=st.step)
        summary.update({k: v for k, v in last.items()})
        summary.update(
            {
                "status": "finished",
                "steps": st.step,
                "time/total_s": st.totals["elapsed"],
                **st.guard.totals(),
                "config": rcfg,
            }
        )
        tracker.set_summary({k: v for k, v in summary.items() if k != "config"})
        _write_summary(out, summary)
        tracker.finish(0)
        return summary
    except BaseException as e:  # noqa: BLE001 - record, keep the checkpoint, re-raise
        # Ctrl-C / SIGTERM is not a failure: the run is unfinished and a re-run resumes it
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        tb, raised = traceback.format_exc()[-4000:], e
        if isinstance(e, WriteError):  # disk full / read-only: say which checkpoint survives
            e = with_last_checkpoint(e, saved_step, out / "checkpoint" / ckpt.FILE)
        summary.update(
            {
                "status": status,
                "error": f"{type(e).__name__}: {e}",
                "steps": st.step,
                **st.guard.totals(),
                "traceback": tb,
                "config": rcfg,
            }
        )
        try:
            _write_summary(out, summary)
        except OSError as w:  # e.g. the same full disk: the status must still be said somewhere
            say_unrecorded(status, out / "summary.json", w)
        tracker.finish(1)
        if e is not raised:
            raise e from None  # one clear error, not the chain of the original OSError
        raise
    finally:
        close_rewards(st.rewards + [(c, 1.0) for c in st.gold])  # the run owns its rewards' sessions
        close_generator(st.generator)  # an engine (vllm) per run: the next arm of a study starts its own
        if st.teacher is not None:
            st.teacher.close()  # a distill: variant's teacher, opened once in setup


class _NullTracker:
    """What ranks other than 0 log to: nothing (rank 0 writes metrics.jsonl and W&B once)."""

    run_id = None

    def log(self, *a: Any, **kw: Any) -> None: ...

    def log_samples(self, *a: Any, **kw: Any) -> None: ...

    def set_summary(self, *a: Any, **kw: Any) -> None: ...

    def truncate_after(self, *a: Any, **kw: Any) -> int:
        return 0

    def finish(self, *a: Any, **kw: Any) -> None: ...


def _finished_summary(out: Path, cfg: RunConfig) -> dict[str, Any] | None:
    """The summary of a run that already reached `cfg.budget.steps`, else None."""
    s = read_json(out / "summary.json")
    return s if s.get("status") == "finished" and int(s.get("steps", -1)) >= cfg.budget.steps else None


def _write_summary(out: Path, summary: dict[str, Any]) -> None:
    if dist.rank() != 0:
        return
    tmp = out / ".summary.json.tmp"
    with write_guard(out / "summary.json", tmp=tmp):
        tmp.write_text(json.dumps(summary, indent=2, default=str))
        os.replace(tmp, out / "summary.json")


def _last_step_metrics(out: Path, step: int) -> dict[str, Any]:
    """The training metrics logged for `step` in `out/metrics.jsonl` (without "step"), {} if none."""
    recs = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("step") == step and "reward/total" in r]
    return {k: v for k, v in recs[-1].items() if k != "step"} if recs else {}
