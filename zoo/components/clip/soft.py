"""Clip rules without a hard token clip (kind "clip"): SAPO's soft gate and GMPO's geometric mean.

Same contract as zoo/components/clip/ppo.py: `fn(logp, logp_old, adv, mask) -> ClipResult`, all `[N, T]`,
padding selected away before any arithmetic (case C7), the log-ratio clamped to [-20, 20].

Sources: SAPO, Gao et al. arXiv 2511.20347 (the gate, eq. 5-6; the objective, eq. 10-12); GMPO,
Zhao et al. arXiv 2507.20673 (verl `geo_mean`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.clip.surrogate import clip_result, prepare
from zoo.components.stats import masked_mean
from zoo.core.registry import register
from zoo.core.types import ClipResult


def _positive(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_sapo(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _positive("tau_pos", params["tau_pos"])
    _positive("tau_neg", params["tau_neg"])


def _check_gmpo(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _positive("eps_low", params["eps_low"])
    _positive("eps_high", params["eps_high"])


@register("clip", "sapo", check=_check_sapo)
def sapo(
    logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, tau_pos: float = 1.0, tau_neg: float = 1.05
) -> ClipResult:
    """SAPO soft gate: loss = -(4 / tau) * sigmoid(tau * (r - 1)) * A, tau = tau_pos where A > 0,
    tau_neg where A <= 0; r = exp(logp - logp_old) per token.

    At r = 1 the value is -(2 / tau) A and the gradient d loss / d logp = -4 s (1 - s) r A = -A
    (s = sigmoid(0) = 1/2), PPO's; away from r = 1 the gradient decays smoothly instead of being cut.
    Nothing is clipped: the flags are all False. The aggregation is the variant's `aggregate` slot
    (the paper, eq. 10, and verl's `sapo`, which ignores loss_agg_mode, use seq_mean_token_mean;
    TRL uses its loss_type's): the `sapo` variant sets seq_mean_token_mean.
    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields.
    Raises ValueError when shapes differ or a temperature is not > 0.
    Source: arXiv 2511.20347 eq. 5-6 (the gate; tau_neg > tau_pos); tau_pos 1.0 / tau_neg 1.05:
    TRL GRPOConfig sapo_temperature_pos / _neg and verl ActorConfig tau_pos / tau_neg defaults."""
    _check_sapo({"tau_pos": tau_pos, "tau_neg": tau_neg}, {})
    m, _, log_ratio, a = prepare(logp, logp_old, adv, mask)
    ratio = log_ratio.exp()  # [N, T]
    tau = torch.where(a > 0, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))  # [N, T]
    loss = -(4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0)) * a  # [N, T]
    never = torch.zeros_like(m)  # [N, T] bool
    return clip_result(loss, never, never, ratio, m)


@register("clip", "gmpo", check=_check_gmpo, level="sequence")
def gmpo(
    logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float = 0.4, eps_high: float = 0.4
) -> ClipResult:
    """GMPO: the sequence's geometric mean of token ratios, each token's log-ratio clipped in log
    space on the side the advantage's sign selects, then one unclipped product with A per row.

    Per real token l_t = logp - logp_old and c_t = clamp(l_t, -eps_low, eps_high); the sign-dependent
    (pessimistic) min is taken per token, before the mean: l~_t = sgn(A) min(sgn(A) l_t, sgn(A) c_t),
    i.e. min(l_t, eps_high) where A > 0 and max(l_t, -eps_low) where A < 0. Row i gets
    g_i = exp(mean_t l~_t), A_i = the row's masked mean advantage, and every real token of row i the
    loss -A_i g_i, so `seq_mean_token_mean` gives the GMPO objective (1/G) sum_i A_i g_i (verl's
    `geo_mean` takes that mean over sequences whatever loss_agg_mode says; the `gmpo` variant sets it).
    A clipped token's gradient is 0; with one token this is `ppo` with eps_low = 1 - e^-eps_low and
    eps_high = e^eps_high - 1 (0.330 / 0.492 for 0.4). Flags mark the tokens clipped in log space
    (clip_high: A > 0, l_t > eps_high; clip_low: A < 0, l_t < -eps_low); `ratio` holds the token ratio.
    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields.
    Raises ValueError when shapes differ or eps_low / eps_high are not > 0.
    Source: Zhao et al. arXiv 2507.20673 (the GMPO objective; clip range (e^-0.4, e^0.4)); verl `geo_mean`."""
    _check_gmpo({"eps_low": eps_low, "eps_high": eps_high}, {})
    m, _, log_ratio, a = prepare(logp, logp_old, adv, mask)
    sgn = torch.sign(a)  # [N, T]
    clamped = log_ratio.clamp(-eps_low, eps_high)  # [N, T]
    pessimistic = sgn * torch.minimum(sgn * log_ratio, sgn * clamped)  # [N, T], per token
    g = masked_mean(pessimistic, m, dim=-1).exp().unsqueeze(-1)  # [N, 1]
    a_seq = masked_mean(a, m, dim=-1).unsqueeze(-1)  # [N, 1]
    loss = (-a_seq * g).expand_as(a)  # [N, T]
    lr = log_ratio.detach()
    low, high = (a < 0) & (lr < -eps_low), (a > 0) & (lr > eps_high)
    return clip_result(loss, low, high, log_ratio.exp(), m)


def gmpo_ppo_eps(eps_low: float = 0.4, eps_high: float = 0.4) -> tuple[float, float]:
    """The ppo (eps_low, eps_high) of the ratio range that GMPO's log-space range [-eps_low, eps_high]
    is for one token: (1 - e^-eps_low, e^eps_high - 1). Raises nothing. Source: arXiv 2507.20673."""
    return 1.0 - math.exp(-eps_low), math.exp(eps_high) - 1.0
