"""The producer of asynchronous training (docs/guides/async.md): rollout workers fed by the pacing rule
(zoo/step/pacing.py), one driver thread per worker in the trainer's process.

    p = Producer(workers, pacer, group_size, sampling)
    p.start(policy_version(policy, 0))
    groups, waited = p.take(step)             # the trainer: step's B groups in group order
    p.publish(policy_version(policy, step + 1))
    p.close()

A driver thread loops: wait until the capacity rule allows a slot (its wait is `time/wait_trainer`),
dispatch it (the slot's prompt and seed are fixed now), give the worker the newest published version
if it holds an older one (between groups only: a group never spans two versions), generate the group,
hand it back. The trainer waits in `take` for its step's groups (`time/wait_workers`). A worker that
raises stops the run: `take` raises one RuntimeError naming the worker and its error; no step trains
on a group that was not completely generated (a group enters the queue only as a whole Batch).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence

from zoo.core.generator_types import SamplingParams
from zoo.core.kinds import PolicyVersion
from zoo.step.pacing import Finished, Pacer


class Producer:
    """Drives `workers` (objects with `version`, `accept(PolicyVersion)` and `generate(prompt, G,
    sampling, seed)`: zoo.backends.generate.rollout_worker.RolloutWorker or its Ray wrapper) under
    `pacer`'s capacity rule. Thread-safe; `take`, `publish` and `state_dict` are the trainer's."""

    def __init__(self, workers: Sequence[Any], pacer: Pacer, group_size: int, sampling: SamplingParams) -> None:
        self.workers, self.pacer = list(workers), pacer
        self.group_size, self.sampling = group_size, sampling
        self.cond = threading.Condition()
        self.latest: PolicyVersion | None = None
        self.stopped = False
        self.error: tuple[int, BaseException] | None = None
        self.idle = [0.0] * len(self.workers)  # seconds each worker waited for the capacity rule
        self.threads: list[threading.Thread] = []
        self.pending_metrics: dict[str, float] = {}  # logged with the next step (a resume's async/regenerated)

    def start(self, first: PolicyVersion) -> None:
        """Publish the trainer's weights `first`, load them into every worker (a Ray actor starts here,
        so its start-up is logged as `async/startup_s` with the first step instead of inside that step's
        wait) and start one driver thread per worker."""
        self.publish(first)
        t0 = time.perf_counter()
        for i, w in enumerate(self.workers):
            try:
                w.accept(first)
            except Exception as e:
                raise RuntimeError(f"rollout worker {i} failed: {type(e).__name__}: {e}") from e
        self.pending_metrics["async/startup_s"] = time.perf_counter() - t0
        for i, w in enumerate(self.workers):
            t = threading.Thread(target=self._drive, args=(i, w), name=f"zoo-rollout-worker-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def publish(self, policy: PolicyVersion) -> None:
        """A new version of the trainer's weights (tensors the trainer no longer writes to): workers
        load it before their next group; the capacity rule moves on."""
        with self.cond:
            self.latest = policy
            self.pacer.publish(policy.version)
            self.cond.notify_all()

    def _next_slot(self, i: int) -> tuple[Any, PolicyVersion] | None:
        """Wait for the capacity rule, then dispatch a slot (None when stopped)."""
        with self.cond:
            t0 = time.perf_counter()
            while not self.stopped and not self.pacer.may_dispatch():
                self.cond.wait()
            self.idle[i] += time.perf_counter() - t0
            if self.stopped:
                return None
            assert self.latest is not None
            return self.pacer.dispatch(), self.latest

    def _drive(self, i: int, w: Any) -> None:
        try:
            while (got := self._next_slot(i)) is not None:
                slot, policy = got
                if w.version < policy.version:
                    w.accept(policy)  # between groups: the group below is sampled with one version
                t0 = time.perf_counter()
                b = w.generate(slot.row["prompt"], self.group_size, self.sampling, slot.seed)
                f = Finished(slot, w.version, b, time.perf_counter() - t0)
                with self.cond:
                    self.pacer.finish(f)
                    self.cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - reported to the trainer by `take`
            with self.cond:
                self.error = self.error or (i, e)
                self.cond.notify_all()

    def take(self, step: int) -> tuple[list[Finished], float]:
        """Step `step`'s B groups in group order, and the seconds the trainer waited for them. Raises
        RuntimeError naming the worker that failed."""
        with self.cond:
            t0 = time.perf_counter()
            while self.error is None and not self.pacer.ready(step):
                self.cond.wait()
            if self.error is not None:
                i, e = self.error
                raise RuntimeError(f"rollout worker {i} failed: {type(e).__name__}: {e}") from e
            return self.pacer.take(step), time.perf_counter() - t0

    def idle_seconds(self) -> float:
        """The workers' mean wait for the capacity rule since the last call (`time/wait_trainer`)."""
        with self.cond:
            out = sum(self.idle) / max(len(self.idle), 1)
            self.idle = [0.0] * len(self.idle)
        return out

    def pop_metrics(self) -> dict[str, float]:
        """Metrics waiting for the next step (a resume's `async/regenerated`), once."""
        out, self.pending_metrics = self.pending_metrics, {}
        return out

    def state_dict(self, step: int) -> dict[str, Any]:
        """`Pacer.state_dict` under the lock (what a checkpoint after `step` steps keeps)."""
        with self.cond:
            return self.pacer.state_dict(step)

    def close(self) -> None:
        """Stop the driver threads after their current group; close workers that hold a process."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=60)
        for w in self.workers:
            close = getattr(w, "close", None)
            if callable(close):
                close()


def assemble(groups: Sequence[Finished], pad_id: int) -> Any:
    """The step's Batch from its groups in group order (reassembly by group index): group ids = the
    slots' group indices, each row's dataset row, and extras["policy_version"] [N] (long): the version
    each row was sampled with."""
    import dataclasses

    import torch

    from zoo.core.batch import concat

    parts = []
    for f in groups:
        b = f.batch
        n = b.size
        extras = {**b.extras, "policy_version": torch.full((n,), int(f.version), dtype=torch.long)}
        parts.append(
            dataclasses.replace(
                b, group_ids=torch.full_like(b.group_ids, f.slot.group), rows=[f.slot.row] * n, extras=extras
            )
        )
    return concat(parts, pad_id)


def published(policy: Any, version: int) -> PolicyVersion:
    """`PolicyVersion(version, ...)` of `policy` with every tensor copied (the trainer goes on updating
    its own weights in place while workers load this version)."""
    from zoo.backends.generate.weights import named_weights

    return PolicyVersion(int(version), tuple((n, t.detach().clone()) for n, t in named_weights(policy)))
