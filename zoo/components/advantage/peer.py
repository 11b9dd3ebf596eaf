"""Advantage estimators that verl, TRL, SkyRL and prime-rl ship (kind "advantage"): MaxRL, OPO, ReMax,
the optimal-token baseline (OTB) and GPG's rescaled group baseline.

Conventions as in zoo/components/advantage/base.py: advantages [N, T], 0 on padding, NaN on the real tokens
of a row whose score is NaN (left out of every group statistic); group statistics in float64 over the
valid members of a group, independent of row order and of the values of the group ids.

Sources (what was checked where): MaxRL, arXiv 2602.02710 (Tajwar et al. 2026), from TRL's MaxRL docs
("p-normalization": divide by the group mean instead of the std), paper text not read here; OPO,
verl `compute_opo_outcome_advantage` (length-weighted group baseline, arXiv 2505.23585), from verl's
code; ReMax, arXiv 2310.10505 §3 and verl `compute_remax_outcome_advantage` (A = r - r_greedy);
OTB, verl `compute_optimal_token_baseline_advantage` and verl's OTB docs page (algo/otb.md) (arXiv 2602.07078), from
verl's code; GPG, arXiv 2504.02546 §3 (alpha = B / (B - M)) and verl `compute_gpg_outcome_advantage`
(alpha = B / count_nonzero(scores)), both read.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.advantage.base import _finish, reward_to_go, sequence_scores, token_rewards
from zoo.components.stats import as_bool, group_constant, group_stats, sanitize
from zoo.core.registry import register
from zoo.core.types import AdvantageInputs, AdvantageResult

#: extras fields the step writes only when the estimator reads them (zoo/step/greedy.py, zoo/step/forwards.py)
GREEDY_SCORE = "greedy_score"
OTB_ENERGY = "otb_energy"


def _broadcast(adv: Tensor, inp: AdvantageInputs) -> AdvantageResult:
    """adv [N] -> AdvantageResult with [N, T] advantages (0 on padding)."""
    mask = as_bool(inp.mask)
    return AdvantageResult(sanitize(adv[:, None].expand(mask.shape), mask), None)


def _group_sum(x: Tensor, group_ids: Tensor) -> Tensor:
    """Per-row sum of x [N] (float64, NaN rows left out) over the row's group -> [N]."""
    _, inv = torch.unique(group_ids, return_inverse=True)
    xv = torch.where(torch.isnan(x), torch.zeros_like(x), x)
    total = torch.zeros(int(inv.max()) + 1 if inv.numel() else 0, dtype=x.dtype, device=x.device)
    return total.index_add_(0, inv, xv)[inv]


def _check_eps(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    e = params["eps"]
    if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 <= e < float("inf"):
        raise ValueError(f"eps must be a finite number >= 0, got {e!r}")


@register("advantage", "maxrl", check=_check_eps, level="sequence", needs_groups=True)
def maxrl(inp: AdvantageInputs, *, eps: float = 1e-6) -> AdvantageResult:
    """MaxRL (p-normalisation): A_i = (s_i - m_g) / (m_g + eps), m_g = mean of the valid s in i's group.
    For 0/1 rewards m_g is the pass rate p, so a group's gradient is weighted by 1/p (the gradient of
    log p, maximum likelihood) instead of GRPO's 1/std. Exactly 0 for an all-alike group and for a
    group whose mean is <= 0 (no success: 1/p undefined; our convention). Use with `normalizer: none`.
    inp.scores [N], inp.mask [N, T], inp.group_ids [N]. Source: arXiv 2602.02710 (TRL MaxRLTrainer
    docs; SkyRL, prime-rl)."""
    s0 = sequence_scores(inp)  # [N]
    s = s0.double()
    mean, _, _ = group_stats(s, inp.group_ids)
    adv = (s - mean) / (mean + eps)
    zero = group_constant(s, inp.group_ids) | (mean <= 0)
    adv = torch.where(zero & ~torch.isnan(s), torch.zeros_like(adv), adv)
    return _broadcast(adv.to(s0.dtype), inp)


@register("advantage", "opo", level="sequence", needs_groups=True)
def opo(inp: AdvantageInputs) -> AdvantageResult:
    """OPO's length-weighted baseline: A_i = s_i - sum_j |o_j| s_j / sum_j |o_j| over the valid members
    of i's group (|o| = real tokens); a group with one valid member gets 0 (verl: baseline 0, i.e.
    A = s: our convention, as `group_mean`). inp.scores [N], inp.mask [N, T], inp.group_ids [N].
    Source: verl `compute_opo_outcome_advantage` (arXiv 2505.23585, "On-Policy RL with Optimal
    reward baseline")."""
    s0 = sequence_scores(inp)  # [N]
    s = s0.double()
    length = as_bool(inp.mask).sum(1).double()  # [N]
    ls = torch.where(torch.isnan(s), torch.full_like(s, float("nan")), length * s)
    lv = torch.where(torch.isnan(s), torch.full_like(s, float("nan")), length)
    base = _group_sum(ls, inp.group_ids) / _group_sum(lv, inp.group_ids).clamp(min=1)
    _, _, count = group_stats(s, inp.group_ids)
    adv = torch.where((count < 2) | group_constant(s, inp.group_ids), torch.zeros_like(s), s - base)
    adv = torch.where(torch.isnan(s), s, adv)
    return _broadcast(adv.to(s0.dtype), inp)


def _extra(inp: AdvantageInputs, name: str, who: str, shape: tuple[int, ...]) -> Tensor:
    t = inp.extras.get(name)
    if t is None:
        raise ValueError(
            f"advantage {who!r} reads {name!r}, which is not in inp.extras: the step writes it when the "
            "variant's estimator declares it (docs/reference/components.md, advantage)"
        )
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    return t


@register("advantage", "remax", reads=(GREEDY_SCORE,), level="token")
def remax(inp: AdvantageInputs) -> AdvantageResult:
    """ReMax: A_t = G_t - b, G_t the reward-to-go of the token rewards (score on the last real token
    plus kl_reward), b = the score of a greedy completion of the same prompt (`extras["greedy_score"]`
    [N]; a NaN baseline makes the row NaN). verl returns the same advantages (returns = G).
    Source: arXiv 2310.10505 §3 (Alg. 1); verl `compute_remax_outcome_advantage`."""
    b = _extra(inp, GREEDY_SCORE, "remax", (inp.mask.shape[0],))
    g = reward_to_go(token_rewards(inp), inp.mask)  # [N, T]
    adv = g - b.to(g.dtype)[:, None]
    nan_b = torch.isnan(b)[:, None] & as_bool(inp.mask)
    return AdvantageResult(torch.where(nan_b, torch.full_like(adv, float("nan")), _finish(adv, inp)), None)


def otb_baseline(returns: Tensor, energy: Tensor, mask: Tensor, group_ids: Tensor, eps: float = 1e-8) -> Tensor:
    """B_t = sum_i G_{i,t} W_{i,t} / (sum_i W_{i,t} + eps) over the rows of a group at each position t,
    W_{i,t} = cumulative energy sum_{j<=t} e_{i,j} (padding 0). returns, energy, mask: [N, T] (padding
    selected away); group_ids [N]. Returns [N, T] (each row its group's baseline; a group of one gets 0,
    as verl). Source: verl `compute_optimal_token_baseline_advantage` (handle_zero_tail false)."""
    m = as_bool(mask)
    g = sanitize(returns.double(), m)
    w = sanitize(energy.double(), m).cumsum(1)
    w = sanitize(w, m)
    _, inv = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    num = torch.zeros(n_groups, g.shape[1], dtype=g.dtype).index_add_(0, inv, g * w)
    den = torch.zeros(n_groups, g.shape[1], dtype=g.dtype).index_add_(0, inv, w)
    size = torch.zeros(n_groups, dtype=g.dtype).index_add_(0, inv, torch.ones_like(inv, dtype=g.dtype))
    base = (num / (den + eps))[inv]
    return torch.where((size[inv] > 1)[:, None], base, torch.zeros_like(base))


@register("advantage", "otb", check=_check_eps, reads=(OTB_ENERGY,), level="token", needs_groups=True)
def otb(inp: AdvantageInputs, *, eps: float = 1e-8) -> AdvantageResult:
    """Optimal token baseline: A_{i,t} = G_{i,t} - B_t, B_t = sum_i G_{i,t} W_{i,t} / (sum_i W_{i,t} + eps)
    over i's group, W_{i,t} = sum_{j<=t} (1 - 2 pi_j + sum_v pi_v^2) (the "realized energy";
    `extras["otb_energy"]` [N, T] holds 1 - 2 pi_j + sum_v pi_v^2 per token, pi the old policy at the
    sampling temperature: the step's old forward writes it, zoo/step/forwards.py `otb_energy`). Returns
    are G. Source: verl `compute_optimal_token_baseline_advantage` (epsilon 1e-8; `handle_zero_tail`
    false; no rollout-IS scaling of W) and verl's OTB docs page (algo/otb.md)."""
    e = _extra(inp, OTB_ENERGY, "otb", tuple(inp.mask.shape))
    g = reward_to_go(token_rewards(inp), inp.mask)  # [N, T]
    base = otb_baseline(g, e, inp.mask, inp.group_ids, eps).to(g.dtype)
    return AdvantageResult(_finish(g - base, inp), _finish(g, inp))


def _check_gpg(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["count"] not in ("advantage", "score"):
        raise ValueError(f"count must be 'advantage' (the paper) or 'score' (verl), got {params['count']!r}")


@register("advantage", "gpg", check=_check_gpg, level="sequence", needs_groups=True)
def gpg(inp: AdvantageInputs, *, count: str = "advantage") -> AdvantageResult:
    """GPG: A_i = alpha (s_i - group mean), alpha = B / (B - M) over the valid rows of the batch, M the
    rows whose group-centred advantage is 0 (`count: advantage`, the paper's "invalid" samples of
    all-alike groups); `count: score` is verl's alpha = B / max(1, #rows with a non-zero score).
    No std division (use `normalizer: none`, verl's f_norm 1). Under data parallelism B is this
    process's batch (the estimator sees one rank's rows). Source: arXiv 2504.02546 §3.2 eq. 9-10;
    verl `compute_gpg_outcome_advantage`."""
    s0 = sequence_scores(inp)
    s = s0.double()
    mean, _, _ = group_stats(s, inp.group_ids)
    centred = torch.where(group_constant(s, inp.group_ids), torch.zeros_like(s), s - mean)
    valid = ~torch.isnan(s)
    b = valid.sum()
    nonzero = (centred != 0) & valid if count == "advantage" else (s != 0) & valid
    alpha = b.double() / nonzero.sum().clamp(min=1).double()
    adv = torch.where(valid, alpha * centred, s)  # NaN rows stay NaN
    return _broadcast(adv.to(s0.dtype), inp)
