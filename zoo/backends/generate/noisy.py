"""The `noisy` generator: wraps another generator and adds N(0, sigma^2) to the raw logits before the
warping, a two-sided sampler/trainer mismatch that is the same on every machine (the noise is drawn on
the CPU from its own seeded stream), for tests and for studying rollout corrections. Top-p
alone gives a one-sided mismatch: every sampled token's ratio pi_old / pi_rollout lies in [top_p, 1]."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

from zoo.core.batch import Batch
from zoo.core.generator_types import Continuation, SamplingParams
from zoo.core.registry import build, register


class LogitNoise:
    """A LogitsProcessor: scores [n, V] + sigma * eps, eps ~ N(0, 1) from a CPU generator seeded with
    `seed` (one stream per generator instance, continued across calls). sigma 0 returns the scores."""

    def __init__(self, sigma: float, seed: int) -> None:
        self.sigma = float(sigma)
        self.rng = torch.Generator().manual_seed(int(seed))

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self.sigma == 0.0:
            return scores
        eps = torch.randn(scores.shape, generator=self.rng, dtype=torch.float32)
        return scores + (self.sigma * eps).to(device=scores.device, dtype=scores.dtype)


class NoisyGenerator:
    """`zoo.core.kinds.Generator`: `inner`'s generate/continue_ with `LogitNoise` placed before every other
    processor; `sync` is the inner's. The inner must apply `SamplingParams.logits_processors`."""

    def __init__(self, inner: Any, sigma: float, seed: int) -> None:
        self.inner, self.noise = inner, LogitNoise(sigma, seed)

    def _with_noise(self, sampling: SamplingParams) -> SamplingParams:
        return replace(sampling, logits_processors=(self.noise, *sampling.logits_processors))

    def generate(self, prompts: Sequence, group_size: int, sampling: SamplingParams, /) -> Batch:
        return self.inner.generate(prompts, group_size, self._with_noise(sampling))

    def continue_(
        self, prefix_ids: Sequence[Sequence[int]], sampling: SamplingParams, stop: Sequence[str] = (), /
    ) -> Continuation:
        return self.inner.continue_(prefix_ids, self._with_noise(sampling), stop)

    def sync(self, policy: nn.Module, /) -> None:
        self.inner.sync(policy)

    def for_eval(self) -> Any:
        """The generator evaluation uses (`eval.backend` unset): `inner`, without the noise, which exists
        to perturb the training rollouts (`zoo.backends.generate.backend.eval_generator`)."""
        return self.inner


def _check(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    sigma, seed = params["sigma"], params["seed"]
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"sigma must be a finite number >= 0 (the logit noise's std), got {sigma!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    build("generator", params["inner"])  # the inner spec resolves (unknown names list the known ones)


@register("generator", "noisy", check=_check)
def noisy(
    policy: nn.Module, tokenizer, /, *, inner: str | dict = "hf", sigma: float = 0.1, seed: int = 0
) -> NoisyGenerator:
    """Wrap the generator `inner` and add N(0, sigma^2) to its raw logits before temperature / top-k /
    top-p (seeded, CPU-drawn: the same on every machine), so logp_rollout differs from the trainer's
    logp two-sidedly. sigma 0: exactly `inner`."""
    return NoisyGenerator(build("generator", inner)(policy, tokenizer), sigma, seed)
