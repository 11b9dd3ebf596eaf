"""Critic (value) losses (kind "critic"):
`fn(values, old_values, returns, mask, counts: StepCounts) -> scalar`, already times its coefficient.

All tensors are [N, T]; padded slots of every input are selected away before any arithmetic, so
NaN/inf there reach neither the loss nor its gradient (case C7). Like the policy aggregators, the
token mean divides by the whole optimizer step's real-token count (counts.tokens), so summing over
micro-batches gives the step's value (cases C2, C3).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.stats import as_bool, check_same_shape, masked_sum, sanitize
from zoo.core.registry import register
from zoo.core.types import StepCounts


def _check_value(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not params["clip_range"] > 0:
        raise ValueError(f"clip_range must be > 0, got {params['clip_range']!r}")
    if not params["coef"] >= 0:
        raise ValueError(f"coef must be >= 0, got {params['coef']!r}")
    if params.get("init", "policy") not in ("policy", "reward_model"):
        raise ValueError(f"init must be policy or reward_model, got {params['init']!r}")


@register("critic", "clipped_value", check=_check_value)
def clipped_value(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    counts: StepCounts,
    *,
    clip_range: float = 0.2,
    coef: float = 0.1,
    init: str = "policy",
) -> Tensor:
    """coef * 0.5 * (sum over real tokens of max((V - R)^2, (V_clip - R)^2)) / counts.tokens,
    V_clip = V_old + clip(V - V_old, -clip_range, clip_range).

    values: [N, T] current V (with gradient); old_values: [N, T] V at rollout time; returns: [N, T]
    targets (GAE advantages + old values); mask: [N, T]; counts: the step's StepCounts.
    Returns a scalar (this micro-batch's share of the step's value loss).
    init: where the value model starts, read by the trainer, not by the loss: "policy" (the policy's
    backbone, a zero head) or "reward_model" (the run's reward model's backbone and head, InstructGPT
    arXiv 2203.02155 §3.5; zoo.rewards.critic_init).
    Raises ValueError when shapes differ, clip_range <= 0, coef < 0 or init is unknown.
    Source: Ziegler et al. arXiv 1909.08593 / openai/lm-human-preferences (value clip 0.2,
    vf_coef 0.1); PPO arXiv 1707.06347 eq. 9 (L^VF in the combined objective)."""
    _check_value({"clip_range": clip_range, "coef": coef}, {})
    check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    m = as_bool(mask)  # [N, T]
    v = sanitize(values, m)  # [N, T]
    v_old = sanitize(old_values.detach(), m)  # [N, T]
    ret = sanitize(returns.detach(), m)  # [N, T]
    v_clip = v_old + (v - v_old).clamp(-clip_range, clip_range)  # [N, T]
    per_token = torch.maximum((v - ret) ** 2, (v_clip - ret) ** 2)  # [N, T], 0 on padding
    return coef * 0.5 * masked_sum(per_token, m) / max(float(counts.tokens), 1.0)
