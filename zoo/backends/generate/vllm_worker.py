"""The worker side of the `vllm` generator's weight transfer: a vLLM worker extension (engine argument
`worker_extension_cls`), mixed into each vLLM worker and reached through the public
`LLM.collective_rpc`. It imports nothing of zoo's beyond this file, so a worker in another process can
load it. The contract is `zoo.core.kinds.PolicyVersion`: an integer version and
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
        self._zoo_retie()
        self.zoo_version = int(version)
        return self.zoo_version

    def _zoo_retie(self) -> None:
        """Tied input/output embeddings (SmolLM2, Qwen2.5-0.5B): vLLM's layer-by-layer reload gives the
        embedding a new tensor and puts the output head's old one back (its loader skips `lm_head.*`
        when tied), so the head would keep the previous weights. Tie it to the new embedding again and
        redo the head's post-load processing (on CPU: the packed GEMM weights of the logits)."""
        runner = self.model_runner  # type: ignore[attr-defined]
        config = runner.model_config.hf_text_config
        if not getattr(config, "tie_word_embeddings", False):
            return
        model = runner.get_model()
        head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        if head is None or embed is None:
            raise RuntimeError(
                f"{type(model).__name__}: tied embeddings but no lm_head / model.embed_tokens "
                f"to tie after a weight reload"
            )
        head.quant_method.tie_weights(head, embed)
        head.quant_method.process_weights_after_loading(head)

    def zoo_weight_version(self) -> int:
        """The last version fully loaded (-1: none, the engine still holds its initial weights)."""
        return self.zoo_version
