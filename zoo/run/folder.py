"""A run folder's bookkeeping in one object: its lease, reuse or a fresh start, the resume from its
checkpoint, config.yaml and summary.json (running, finished, failed or interrupted).

    folder = RunFolder(cfg)                 # cfg.out_dir()
    with folder.leased():                   # rank 0: makes the folder, holds zoo.run.lock's lease
        done = folder.claim(resume, hint)   # a finished run's summary (nothing to do), else None
        state = folder.restore(st, resume)  # the checkpoint's state restored into st, or None
        folder.write_config(st, resumed=state is not None)
        ...                                 # folder.checkpoint(st, run_id) after a step
        folder.write_summary(folder.finished(st, last))  # or, in `except`: folder.record_failure(e, st)

Which folders may be reused is zoo.run.fingerprint; what a checkpoint holds is zoo.run.checkpoint.
Every rank builds one; only rank 0 (`main`) writes.
"""

from __future__ import annotations

import json
import logging
import os
import traceback
from contextlib import contextmanager
from typing import Any, Iterator

import yaml

from zoo.backends.train import checkpoint as ckpt
from zoo.config.run import RunConfig
from zoo.core import dist
from zoo.core.faults import WriteError, say_unrecorded, with_last_checkpoint, write_guard
from zoo.run.checkpoint import restore_checkpoint, save_checkpoint
from zoo.run.jsonl import missing_step_record, read_jsonl
from zoo.run.provenance import batch_size_warnings
from zoo.run.tracking import read_json
from zoo.step.types import RunState

log = logging.getLogger("zoo.run.trainer")  # the run's logger: its lines keep the name they are filtered by


def resolved_config(st: RunState) -> dict[str, Any]:
    """What config.yaml holds: the run config, the variant as resolved and the provenance."""
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


class RunFolder:
    """`cfg.out_dir()` and what the trainer records in it. `summary` is the summary.json being built,
    `config` the resolved config (config.yaml) once written, `saved_step` the last good checkpoint's step."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg, self.out = cfg, cfg.out_dir()
        self.summary: dict[str, Any] = {}
        self.config: dict[str, Any] = {}
        self.saved_step: int | None = None

    @property
    def main(self) -> bool:
        """Rank 0: the one process that writes the folder."""
        return dist.rank() == 0

    # ----------------------------------------------------------------------- before setup

    def make(self) -> None:
        """Create the folder, or raise WriteError (an OSError) naming it and the key that sets it (output_dir or name)."""
        cfg, out = self.cfg, self.out
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

    @contextmanager
    def leased(self) -> Iterator[None]:
        """Make the folder and hold its lease (zoo.run.lock.LockedError names another holder)."""
        from zoo.run import lock

        self.make()
        with lock.locked(self.out / lock.LOCK_NAME, what=f"run folder {self.out}"):
            yield

    def claim(self, resume: bool, fresh_hint: str | None) -> dict[str, Any] | None:
        """What a re-run does with the folder (zoo.run.fingerprint.check_reuse): None to train here
        (`resume=False`, `--fresh`: the old checkpoint and summary deleted first), or the summary of a
        run that already finished (nothing to do). Raises StaleRunError for another config's results."""
        from zoo.run import fingerprint as fp

        out, cfg = self.out, self.cfg
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
        if not resume and self.main:
            fp.clear_results(out)
        done = self._finished_summary() if reuse == "same" else None
        if done is not None:
            log.warning("%s already finished %d steps; nothing to do (use --fresh to train again)", out, done["steps"])
            return done
        out.mkdir(parents=True, exist_ok=True)
        return None

    def _finished_summary(self) -> dict[str, Any] | None:
        """The summary of a run that already reached `cfg.budget.steps`, else None."""
        s = read_json(self.out / "summary.json")
        return s if s.get("status") == "finished" and int(s.get("steps", -1)) >= self.cfg.budget.steps else None

    # ----------------------------------------------------------------------- after setup

    def restore(self, st: RunState, resume: bool) -> dict[str, Any] | None:
        """Restore `st` from the folder's checkpoint (when `resume` and one is saved): returns its state.
        Else None, and rank 0 deletes any checkpoint (an older run's must not become state.prev.pt)."""
        out = self.out
        state = ckpt.load(out / "checkpoint") if resume else None
        if state is not None:
            with ckpt.restoring(out / "checkpoint" / ckpt.FILE):
                restore_checkpoint(st, state, out / "checkpoint")
            if gap := missing_step_record(out / "metrics.jsonl", st.step):  # every rank: the same file
                raise ckpt.CheckpointError(gap)
            log.warning("resuming %s from its checkpoint at step %d of %d", out, st.step, self.cfg.budget.steps)
            for w in batch_size_warnings(self._recorded_provenance(), st.provenance) if self.main else ():
                log.warning(w)
        elif self.main:
            ckpt.clear(out / "checkpoint")  # a fresh start: an older run's checkpoint must not become state.prev.pt
        self.saved_step = (
            st.step if state is not None else None
        )  # the last good checkpoint (for a write error's message)
        return state

    def _recorded_provenance(self) -> dict[str, Any] | None:
        """The provenance the folder's config.yaml recorded (None: no readable record)."""
        try:
            rec = yaml.safe_load((self.out / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            return None
        return rec.get("provenance") if isinstance(rec, dict) else None

    def write_config(self, st: RunState, resumed: bool) -> dict[str, Any]:
        """Write fingerprint.json and config.yaml (rank 0) and start the summary with the fingerprint (and,
        resumed, the evaluation before training already recorded). Returns the resolved config."""
        from zoo.run import fingerprint as fp

        out, cfg = self.out, self.cfg
        rcfg = resolved_config(st)
        rcfg["fingerprint"] = (
            fp.write_record(out, cfg) if self.main else dict(zip(("digest", "fields"), fp.fingerprint(cfg)))
        )
        if self.main:
            with write_guard(out / "config.yaml"):
                (out / "config.yaml").write_text(yaml.safe_dump(rcfg, sort_keys=False))
        self.config = rcfg
        self.summary = (
            {k: v for k, v in read_json(out / "summary.json").items() if k.startswith("eval/before")} if resumed else {}
        )
        self.summary.update(fingerprint=rcfg["fingerprint"]["digest"], fingerprint_fields=rcfg["fingerprint"]["fields"])
        return rcfg

    # ----------------------------------------------------------------------- during and after the loop

    def checkpoint(self, st: RunState, tracker_id: str | None) -> None:
        """Save the run state (zoo.run.checkpoint) and remember its step as the last good one."""
        save_checkpoint(st, self.out, tracker_id)
        self.saved_step = st.step

    def last_step_metrics(self, step: int) -> dict[str, Any]:
        """The training metrics logged for `step` in metrics.jsonl (without "step"), {} if none."""
        recs = [r for r in read_jsonl(self.out / "metrics.jsonl") if r.get("step") == step and "reward/total" in r]
        return {k: v for k, v in recs[-1].items() if k != "step"} if recs else {}

    def finished(self, st: RunState, last: dict[str, Any]) -> dict[str, Any]:
        """The summary of a finished run: the last step's metrics, the totals and the config (not yet written)."""
        self.summary.update({k: v for k, v in last.items()})
        self.summary.update(
            {
                "status": "finished",
                "steps": st.step,
                "time/total_s": st.totals["elapsed"],
                **st.guard.totals(),
                "config": self.config,
            }
        )
        return self.summary

    def record_failure(self, e: BaseException, st: RunState) -> BaseException:
        """Write summary.json with status "failed" ("interrupted" for Ctrl-C / SIGTERM), the error and
        the traceback's end; call it inside `except`. Returns the error to raise: `e`, or for a
        WriteError one that names the last good checkpoint. A summary that cannot be written is said on stderr."""
        # Ctrl-C / SIGTERM is not a failure: the run is unfinished and a re-run resumes it
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        tb = traceback.format_exc()[-4000:]
        if isinstance(e, WriteError):  # disk full / read-only: say which checkpoint survives
            e = with_last_checkpoint(e, self.saved_step, self.out / "checkpoint" / ckpt.FILE)
        self.summary.update(
            {
                "status": status,
                "error": f"{type(e).__name__}: {e}",
                "steps": st.step,
                **st.guard.totals(),
                "traceback": tb,
                "config": self.config,
            }
        )
        try:
            self.write_summary(self.summary)
        except OSError as w:  # e.g. the same full disk: the status must still be said somewhere
            say_unrecorded(status, self.out / "summary.json", w)
        return e

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Replace summary.json atomically (rank 0; a failed write is one WriteError naming it)."""
        if not self.main:
            return
        out = self.out
        tmp = out / ".summary.json.tmp"
        with write_guard(out / "summary.json", tmp=tmp):
            tmp.write_text(json.dumps(summary, indent=2, default=str))
            os.replace(tmp, out / "summary.json")
