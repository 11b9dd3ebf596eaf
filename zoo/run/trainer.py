"""`zoo run`: train one variant on one model and task, with checkpoints a restart resumes from.

    summary = train(load_run_config("run.yaml"))  # zoo.study.run_file

Writes `cfg.out_dir()/{config.yaml, metrics.jsonl, samples.jsonl, summary.json, checkpoint/}`.
`_train` is the loop: set up, evaluate before, then per step the step (`zoo.step.pipeline.step`), its
log, the guards, an evaluation and a checkpoint when due; evaluate after. Building the run (models,
data, optimizers) is `zoo.run.setup`; the run folder's bookkeeping (lease, reuse, resume, config.yaml,
summary.json) is `zoo.run.folder.RunFolder`; the evaluator and the progress bar are `zoo.run.progress`.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

from zoo.backends.train.memory import reset_peak_memory
from zoo.config.run import RunConfig, WandbOpts
from zoo.config.variant import Variant
from zoo.core import dist, guards
from zoo.rewards.session import close_rewards
from zoo.run.folder import RunFolder, resolved_config
from zoo.run.progress import evaluator, progress_bar
from zoo.run.rollouts import close_rollouts, open_rollouts
from zoo.run.setup import setup, validate_run
from zoo.step import pipeline
from zoo.step.types import RunState

__all__ = ["close_generator", "resolved_config", "setup", "train", "validate_run"]


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
    dist.init_from_env()  # under a launcher join the group first: only rank 0 takes the lease
    folder = RunFolder(cfg)
    if dist.rank() != 0:
        return _train(folder, resume, progress=progress, on_step=on_step, fresh_hint=fresh_hint)
    checked = validate_run(cfg)  # before the run folder is made or read: refused as `zoo validate` refuses it
    with folder.leased():
        return _train(folder, resume, progress=progress, on_step=on_step, fresh_hint=fresh_hint, checked=checked)


def _train(
    folder: RunFolder,
    resume: bool,
    *,
    progress: bool,
    on_step: Callable[[int, dict[str, Any]], None] | None,
    fresh_hint: str | None,
    checked: tuple[Variant, list[str]] | None = None,
) -> dict[str, Any]:
    """The loop (see the module doc) on this rank, with its `folder`'s bookkeeping."""
    cfg = folder.cfg
    if checked is None:  # ranks other than 0 check here (rank 0 did before taking the lease)
        checked = validate_run(cfg)
    if (done := folder.claim(resume, fresh_hint)) is not None:
        return done  # finished already: nothing to do
    st, tracker = _set_up(folder, resume, checked)
    fail_at = int(os.environ.get("ZOO_FAIL_AT_STEP", "0") or 0)
    try:
        evaluate_run = evaluator(st, announce=progress and folder.main)
        _eval_before(st, folder, tracker, evaluate_run)
        last: dict[str, Any] = {}
        with progress_bar(progress and folder.main, cfg.budget.steps, st.step) as bar:
            while st.step < cfg.budget.steps:
                last = _step(st, folder, tracker)  # the step, its log and the guards
                if cfg.eval.every and st.step % cfg.eval.every == 0 and st.step < cfg.budget.steps:
                    tracker.log(evaluate_run(), step=st.step)
                if st.step % cfg.checkpoint.every == 0 or st.step == cfg.budget.steps:
                    folder.checkpoint(st, tracker.run_id)
                bar(st.step, last)
                if on_step:
                    on_step(st.step, last)
                if fail_at and st.step == fail_at:
                    raise RuntimeError(f"ZOO_FAIL_AT_STEP={fail_at}: simulated crash")
        return _eval_after(st, folder, tracker, evaluate_run, last)
    except BaseException as e:  # noqa: BLE001 - record, keep the checkpoint, re-raise
        error = folder.record_failure(e, st)
        tracker.finish(1)
        if error is not e:
            raise error from None  # one clear error, not the chain of the original OSError
        raise
    finally:
        _close(st)


def _set_up(folder: RunFolder, resume: bool, checked: tuple[Variant, list[str]]) -> tuple[RunState, Any]:
    """The run state (restored from the folder's checkpoint on a resume), config.yaml and the tracker."""
    from zoo.run.tracking import Tracker

    cfg = folder.cfg
    reset_peak_memory(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    st = setup(cfg, checked=checked)
    state = folder.restore(st, resume)
    open_rollouts(st, state.get("async") if state else None)  # an async: run's workers, after the restore
    rcfg = folder.write_config(st, resumed=state is not None)
    if not folder.main:
        return st, _NullTracker()
    tracker = Tracker.for_run(
        cfg,
        config=rcfg,
        resolved_slots=rcfg["resolved_variant"]["slots"],
        resume_id=state.get("tracker_id") if state else None,
    )
    # records past the checkpoint (or all of them on a fresh start) belong to a lost run
    tracker.truncate_after(st.step if state is not None else -1)
    return st, tracker


def _eval_before(st: RunState, folder: RunFolder, tracker: Any, evaluate_run: Callable[[], dict[str, Any]]) -> None:
    """Evaluate the untrained policy once (not again on a resume) and record it in summary.json at once."""
    summary = folder.summary
    if st.step == 0 and "eval/before" not in summary:
        res = evaluate_run(before="defer")  # None: another arm of the study computes it (zoo.run.eval_before)
        if res is not None:
            _record_before(st, folder, tracker, res)


def _record_before(st: RunState, folder: RunFolder, tracker: Any, res: dict[str, Any]) -> None:
    """Keep the evaluation before training in summary.json at once and log it at step 0."""
    summary = folder.summary
    summary["eval/before"] = res
    if res:
        tracker.log({**res, "eval/phase": 0.0}, step=0)
    # persisted now: a run killed (kill -9) before it writes its final summary keeps it for the resume
    folder.write_summary({**summary, "status": "running", "steps": st.step})


def _step(st: RunState, folder: RunFolder, tracker: Any) -> dict[str, Any]:
    """One training step, logged and guarded; returns its metrics."""
    res = pipeline.step(st)
    m, samples = res.metrics, res.samples
    tracker.log(m, step=st.step)
    guards.after_run_step(st, m)  # metrics reduced over ranks: all agree
    guards.check_finite_weights(st.models, st.step, folder.saved_step)
    every = (st.cfg.tracking.wandb_opts() or WandbOpts()).table_every
    if samples and (st.step % every == 0 or st.step == 1):
        tracker.log_samples(st.step, samples[:16])
    return m


def _eval_after(
    st: RunState, folder: RunFolder, tracker: Any, evaluate_run: Callable[[], dict[str, Any]], last: dict[str, Any]
) -> dict[str, Any]:
    """The end-of-run guards, the evaluation after training and the finished summary (written, returned)."""
    guards.at_end(st.guard, st.step)
    if not last and st.step:  # resumed after its last step: that step's metrics are in metrics.jsonl
        last = folder.last_step_metrics(st.step)
    if "eval/before" not in folder.summary:  # deferred at step 0: the other arm's, or computed on the initial policy
        _record_before(st, folder, tracker, evaluate_run(before="late") or {})
    summary = folder.summary
    summary["eval/after"] = evaluate_run()
    if summary["eval/after"]:
        tracker.log({**summary["eval/after"], "eval/phase": 1.0}, step=st.step)
    summary = folder.finished(st, last)
    tracker.set_summary({k: v for k, v in summary.items() if k != "config"})
    folder.write_summary(summary)
    tracker.finish(0)
    return summary


def _close(st: RunState) -> None:
    """Close what the run opened: its rollout workers, rewards' sessions, generator's engine and a teacher."""
    close_rollouts(st)
    close_rewards(st.rewards + [(c, 1.0) for c in st.gold])  # the run owns its rewards' sessions
    close_generator(st.generator)  # an engine (vllm) per run: the next arm of a study starts its own
    if st.teacher is not None:
        st.teacher.close()  # a distill: variant's teacher, opened once in setup


def close_generator(gen: Any) -> None:
    """Shut down a generator that holds an engine (`close()`, e.g. vllm's) and collect it, so a study's
    next arm in this process does not hold two engines; a generator without `close` is left alone."""
    close = getattr(gen, "close", None)
    if callable(close):
        close()
        import gc

        gc.collect()


class _NullTracker:
    """What ranks other than 0 log to: nothing (rank 0 writes metrics.jsonl and W&B once)."""

    run_id = None

    def log(self, *a: Any, **kw: Any) -> None: ...

    def log_samples(self, *a: Any, **kw: Any) -> None: ...

    def set_summary(self, *a: Any, **kw: Any) -> None: ...

    def truncate_after(self, *a: Any, **kw: Any) -> int:
        return 0

    def finish(self, *a: Any, **kw: Any) -> None: ...
