"""Simulated staleness (`async: {backend: simulated}`, docs/guides/async.md): the staleness of the
asynchronous step made exact and cheap for studies. No workers and no threads: when step s takes its
groups they are sampled, in the trainer's process, with the weights the trainer published after step
max(s - k, first), held in a ring of the last k + 1 versions. Staleness is then exactly min(s, k)
(a checkpoint keeps the older versions of the ring, so a resumed run goes on as the uninterrupted one),
independent of timing, and the run is deterministic
(the slots' prompts and seeds are the asynchronous step's, zoo/step/pacing.py), so a grid over k
isolates what staleness does to learning from what timing does. It costs what the synchronous step
costs, plus k + 1 copies of the weights.
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.core.generator_types import SamplingParams
from zoo.core.kinds import PolicyVersion
from zoo.step.pacing import Finished, Pacer


class SimulatedProducer:
    """`zoo.step.producer.Producer`'s interface over one `worker` (a RolloutWorker) used inline."""

    def __init__(
        self,
        worker: Any,
        pacer: Pacer,
        group_size: int,
        sampling: SamplingParams,
        saved: dict[str, Any] | None = None,
    ) -> None:
        """saved: on a resume, the checkpoint's queue (`state_dict`), whose "versions" are the ring's older
        versions, each as the tensors that differ from the newest; `start` rebuilds them."""
        self.worker, self.pacer = worker, pacer
        self.group_size, self.sampling = group_size, sampling
        self.versions: dict[int, PolicyVersion] = {}
        self.pending_metrics: dict[str, float] = {}
        self.saved_versions: dict[int, dict[str, Any]] = dict((saved or {}).get("versions") or {})

    def start(self, first: PolicyVersion) -> None:
        """Keep `first` (the trainer's weights now) and, on a resume, the saved older versions of the ring
        (each tensor the checkpoint does not hold is the newest's, `first`'s)."""
        for v, changed in sorted(self.saved_versions.items()):
            tensors = tuple((n, changed.get(n, t)) for n, t in first.tensors)
            self.versions[int(v)] = PolicyVersion(int(v), tensors)
        self.saved_versions = {}
        self.publish(first)

    def publish(self, policy: PolicyVersion) -> None:
        """Keep `policy` and the k versions before it (the oldest a later step may sample with)."""
        self.versions[policy.version] = policy
        self.pacer.publish(policy.version)
        for v in [v for v in self.versions if v < policy.version - self.pacer.max_staleness]:
            del self.versions[v]

    def take(self, step: int) -> tuple[list[Finished], float]:
        """Step `step`'s B groups, sampled now with version max(step - k, the oldest kept); no wait."""
        v = max(step - self.pacer.max_staleness, min(self.versions))
        if self.worker.version < v:
            self.worker.accept(self.versions[v])
        out = []
        for _ in range(self.pacer.groups_per_step):
            slot = self.pacer.dispatch()
            b = self.worker.generate(slot.row["prompt"], self.group_size, self.sampling, slot.seed)
            f = Finished(slot, self.worker.version, b)
            self.pacer.finish(f)
            out.append(f)
        return self.pacer.take(step), 0.0

    def idle_seconds(self) -> float:
        return 0.0

    def pop_metrics(self) -> dict[str, float]:
        out, self.pending_metrics = self.pending_metrics, {}
        return out

    def state_dict(self, step: int) -> dict[str, Any]:
        """The pacer's state and the ring's versions older than the newest (version `step`, the trainer's
        own weights, which the checkpoint holds anyway), each as the tensors that differ from the newest:
        with LoRA only the merged adapted layers. {version: {name: tensor}}."""
        newest = self.versions[max(self.versions)]
        ref = dict(newest.tensors)
        older = {
            v: {n: t for n, t in p.tensors if not torch.equal(t, ref[n])}
            for v, p in self.versions.items()
            if v != newest.version
        }
        return {**self.pacer.state_dict(step), "versions": older}

    def close(self) -> None:
        pass
