"""The worker side of the `vllm` generator's weight transfer: a vLLM worker extension (engine argument
`worker_extension_cls`), mixed into each vLLM worker and reached through the public
`LLM.collective_rpc`. It imports nothing of zoo's beyond this file, so a worker in another process can
load it. The contract is `zoo.backends.generate.weights.PolicyVersion`: an integer version and
(name, tensor) pairs in the base model's names."""
from __future__ import annotations

from typing import Sequence

import torch


class ZooWeightSync:
    """Methods added to every vLLM worker (vLLM mixes this class into the worker class)."""

    zoo_version: int = -1

    def _zoo_model(self):
        runner = self.model_runner  # type: ignore[attr-defined]
        get = getattr(runner, "get_model", None)
        return get() if callable(get) else runner.model

    def zoo_load_weights(self, version: int, names: Sequence[str], tensors: Sequence[torch.Tensor],
                         done: bool = True) -> int:
        """Load (name, tensor) pairs through the model's own weight loader (it fuses q/k/v and gate/up
        and casts to the engine's dtype); with `done`, record `version` as the one now served.
        Returns the version served (the previous one while a multi-part transfer is incomplete)."""
        model = self._zoo_model()
        model.load_weights(weights=list(zip(names, tensors)))
        if done:
            self.zoo_version = int(version)
        return self.zoo_version

    def zoo_weight_version(self) -> int:
        """The last version fully loaded (-1: none, the engine still holds its initial weights)."""
        return self.zoo_version

    def zoo_weight_checksum(self) -> float:
        """The float64 sum of every parameter of the served model (a test reads it)."""
        return float(sum(p.detach().double().sum() for p in self._zoo_model().parameters()))
