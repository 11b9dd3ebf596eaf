"""Off-policy sequence mask (kind "correction"): DeepSeek-V3.2's keep/drop mask on whole sequences
(DeepSeek-AI 2025, "DeepSeek-V3.2", arXiv 2512.02556, eq. 9; TRL `off_policy_mask_threshold`).

    kl_i  = (1 / |o_i|) sum_t (logp_rollout_{i,t} - sg(logp_{i,t}))      over the row's real tokens
    M_i,t = 0 where A_{i,t} < 0 and kl_i > delta, else 1

A sequence the current policy has drifted far from (both sources of off-policyness: the sampler's
numerics and the updates since the rollout, since logp is the update's own forward) and that would be
pushed down (A < 0) is dropped: learning from one's own far-off mistakes is what destabilises. The
paper's pi_old "denotes the sampling probabilities directly returned by the inference framework": here
logp_rollout (TRL prefers its `sampling_per_token_logps`, falling back to old_per_token_logps).

Conventions: the advantage is taken per token, as eq. 9 writes A_{i,t} (TRL's advantages are one per
sequence, so the two agree for every sequence-level estimator); a real token whose log-ratio is NaN
(a sampler that could not score it) counts as 0 evidence and stays in the mean's denominator, as TRL's
`nan_to_num(kl_div, nan=0.0)`; padded slots are selected away. delta has no default in the paper or
TRL (None there = off); 0.5 is TRL's documented example value.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.stats import as_bool, check_same_shape, sanitize
from zoo.core.registry import register
from zoo.core.types import TermInputs


def _check(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    d = params["delta"]
    if not isinstance(d, (int, float)) or isinstance(d, bool) or not 0 < d < float("inf"):
        raise ValueError(f"delta must be a finite number > 0 (a mean KL threshold), got {d!r}")


def sequence_mean_kl(logp: Tensor, logp_rollout: Tensor, mask: Tensor) -> Tensor:
    """Per row, the mean over real tokens of logp_rollout - logp (detached; NaN on a real token -> 0,
    padding selected away; a row without real tokens: 0). logp, logp_rollout, mask: [n, T]. Returns
    [n, 1]. Source: DeepSeek-V3.2 arXiv 2512.02556 eq. 9; TRL `get_off_policy_mask`."""
    m = as_bool(mask)
    d = sanitize(logp_rollout.detach().float().to(logp.device), m) - sanitize(logp.detach().float(), m)
    d = sanitize(torch.nan_to_num(d, nan=0.0, posinf=float("inf"), neginf=float("-inf")), m)
    return d.sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1)


@register("correction", "off_policy_sequence_mask", check=_check, reads=("logp_rollout",))
def off_policy_sequence_mask(inp: TermInputs, *, delta: float = 0.5) -> Tensor:
    """Drop sequences with A < 0 whose mean per-token (logp_rollout - logp) exceeds delta: weight 0
    where A_t < 0 and kl_i > delta, 1 elsewhere on real tokens, 0 on padding (module docstring).

    inp.logp, inp.logp_rollout, inp.advantages, inp.mask: [n, T]. Returns the detached 0/1 weight
    [n, T]. Raises ValueError without logp_rollout or when shapes differ.
    Source: DeepSeek-V3.2 arXiv 2512.02556 eq. 9 (delta unstated); TRL GRPOConfig
    `off_policy_mask_threshold` (default None = off, example 0.5) and GRPOTrainer.get_off_policy_mask."""
    if inp.logp_rollout is None:
        raise ValueError(
            "correction 'off_policy_sequence_mask' needs the sampler's log-probs (logp_rollout), and this "
            "generator does not report them: use a generator that does (sampling.backend)"
        )
    check_same_shape(logp=inp.logp, logp_rollout=inp.logp_rollout, advantages=inp.advantages, mask=inp.mask)
    m = as_bool(inp.mask)
    far = sequence_mean_kl(inp.logp, inp.logp_rollout, m) > delta  # [n, 1]
    neg = sanitize(inp.advantages.detach(), m) < 0  # [n, T]
    return sanitize((~(neg & far)).float(), m)
