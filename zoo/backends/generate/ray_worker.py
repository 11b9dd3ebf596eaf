"""Rollout workers as Ray actors (`async: {backend: ray}`, docs/guides/async.md): a thin wrapper that
runs `zoo.backends.generate.rollout_worker.RolloutWorker` in its own process, one actor per worker,
with the same methods, each call blocking until the actor answers (the trainer calls them from one
thread per worker, zoo/step/producer.py, so a blocked call waits only for its own worker).

On one machine `ray.init` starts a local Ray whose workers get this checkout's zoo on their
PYTHONPATH and OpenMP's passive wait policy (as `zoo ablate --ray`, zoo/study/ray_runner.py); on a
cluster joined before the run (`ray.init(address=...)` by the caller) the actors are placed by Ray.
Ray is the optional extra `pip install 'variant-zoo[ray]'`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from zoo.backends.generate.rollout_worker import RolloutWorker
from zoo.core.batch import Batch
from zoo.core.generator_types import SamplingParams
from zoo.core.kinds import PolicyVersion


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("async.backend ray needs Ray: pip install 'variant-zoo[ray]'") from None
    return ray


def init_local_ray(num_cpus: int) -> None:
    """Start a local Ray here unless one is running (the actors then find zoo as this process does)."""
    ray = _ray()
    if ray.is_initialized():
        return
    root = str(Path(__file__).resolve().parents[3])  # the folder holding the zoo package
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": path, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY") or "PASSIVE"}
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env})


class RayWorker:
    """A RolloutWorker in a Ray actor (one CPU, `threads` torch threads), called like the local one."""

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        dtype: torch.dtype = torch.float32,
        threads: int = 1,
        generation_config: Any = None,
    ):
        ray = _ray()
        self._ray = ray
        actor = ray.remote(num_cpus=1, max_restarts=0)(RolloutWorker)
        self.actor = actor.remote(config, tokenizer, dtype, threads, generation_config)
        self.version = -1

    def accept(self, policy: PolicyVersion, /) -> int:
        """`RolloutWorker.accept` in the actor."""
        self.version = int(self._ray.get(self.actor.accept.remote(policy)))
        return self.version

    def generate(self, prompt: Any, group_size: int, sampling: SamplingParams, seed: int) -> Batch:
        """`RolloutWorker.generate` in the actor."""
        return self._ray.get(self.actor.generate.remote(prompt, group_size, sampling, seed))

    def close(self) -> None:
        """End the actor's process."""
        self._ray.kill(self.actor)
