"""The `hf` generator (registry kind `generator`, chosen by `sampling.backend`): HF `generate` on the
policy module itself, with the shared-prompt KV cache and `logp_rollout` from the scores it samples
from. `sync` is a no-op: it reads the policy's weights directly."""

from __future__ import annotations

from typing import Sequence

from torch import nn

from zoo.backends.generate.continuation import continue_rows
from zoo.backends.generate.hf import generate_rollout
from zoo.backends.generate.sampling_config import rollout_kwargs
from zoo.core.batch import Batch
from zoo.core.generator_types import Continuation, SamplingParams
from zoo.core.registry import register


class HFGenerator:
    """`zoo.core.kinds.Generator` over a transformers causal LM (the policy, LoRA or not)."""

    def __init__(self, policy: nn.Module, tokenizer, processor=None) -> None:
        self.policy, self.tokenizer = policy, tokenizer
        self.processor = processor  # a vision-language policy's processor (images in prompts), else None

    def generate(
        self, prompts: Sequence, group_size: int, sampling: SamplingParams, images: Sequence | None = None, /
    ) -> Batch:
        """G completions per prompt -> Batch with logp_rollout [N, T] (`generate_rollout`); with `images`
        (one list per prompt) through `self.processor`, the Batch's `media` holding each row's."""
        return generate_rollout(
            self.policy,
            self.tokenizer,
            prompts,
            group_size=group_size,
            **rollout_kwargs(sampling),
            logits_processors=sampling.logits_processors,
            images=images,
            processor=self.processor,
        )

    def continue_(
        self, prefix_ids: Sequence[Sequence[int]], sampling: SamplingParams, stop: Sequence[str] = (), /
    ) -> Continuation:
        """Extend each row from its own prefix (`continuation.continue_rows`)."""
        return continue_rows(self.policy, self.tokenizer, prefix_ids, sampling, stop)

    def sync(self, policy: nn.Module, /) -> None:
        """No-op when `policy` is the module this generator samples with; otherwise it samples with `policy`
        from now on (e.g. a trainer that rebuilt its policy module)."""
        self.policy = policy


@register("generator", "hf")
def hf(policy: nn.Module, tokenizer, /) -> HFGenerator:
    """HF `generate` on the policy itself (shared-prompt KV cache); logp_rollout from the scores it
    samples from (temperature, top-k, top-p in transformers' order), no extra forward."""
    return HFGenerator(policy, tokenizer)
