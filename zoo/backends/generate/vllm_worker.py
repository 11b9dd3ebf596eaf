"""The worker side of the `vllm` generator's weight transfer: a vLLM worker extension (engine argument
`worker_extension_cls`), mixed into each vLLM worker and reached through the public
`LLM.collective_rpc`. It imports nothing of zoo's beyond this file, so a worker in another process can
load it. The contract is `zoo.backends.generate.weights.PolicyVersion`: an integer version and
(name, tensor) pairs in the base model's names."""
from __future__ import annotations

from typing import Iterable

import torch


class ZooWeightSync:
    """Methods added to every vLLM worker (vLLM mixes this class into the worker class)."""

    zoo_version: int = -1

    def zoo_load_weights(self, version: int, pairs: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Load every (name, tensor) pair of a policy version (base-model names, any dtype) through vLLM's
        in-place reload (`Worker.reload_weights`: layer by layer through the model's own weight
        loader, which fuses q/k/v and gate/up, casts, and redoes the kernel-format processing vLLM
        applied after the first load), then record `version` as the one served. `pairs` may be a
        generator (in the trainer's process nothing is copied before vLLM reads it). Returns `version`."""
        self.reload_weights(weights_iterator=iter(pairs))  # type: ignore[attr-defined]
        self.zoo_version = int(version)
        return self.zoo_version

    def zoo_weight_version(self) -> int:
        """The last version fully loaded (-1: none, the engine still holds its initial weights)."""
        return self.zoo_version
