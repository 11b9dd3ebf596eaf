"""Pass@k advantage estimators (kind "advantage"): train for the best of k samples, not the mean.

`pass_at_k` is verl's `grpo_passk` (the group's best completion alone gets r_max - r_second, by
default over the group's std); `pass_at_k_analytic` is the closed-form pass@k advantage of
Chen et al. arXiv 2508.10751 §3.3 (eqs. 14-15) for binary rewards. Both are sequence level: one
value per completion, broadcast over its real tokens, 0 on padding, NaN on a NaN-score row (left
out of its group's statistics), and independent of row order (case C1).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.advantage.base import sequence_scores
from zoo.components.stats import as_bool, group_stats, sanitize
from zoo.core.registry import register
from zoo.core.types import AdvantageInputs, AdvantageResult


def _broadcast(adv: Tensor, s: Tensor, mask: Tensor) -> Tensor:
    """adv [N] -> [N, T] on the real tokens of `mask`, NaN on the real tokens of rows with NaN s."""
    m = as_bool(mask)  # [N, T]
    adv = torch.where(torch.isnan(s), torch.full_like(adv, float("nan")), adv)  # [N]
    return sanitize(adv[:, None].expand(m.shape), m)  # [N, T]


def _check_eps(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    eps = params["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")


@register("advantage", "pass_at_k", check=_check_eps, level="sequence", needs_groups=True)
def pass_at_k(inp: AdvantageInputs, *, scale_by_std: bool = True, eps: float = 1e-6) -> AdvantageResult:
    """Best-of-group advantage (verl `grpo_passk`): in each group, the single completion with the
    highest sequence score s gets A = s_max - s_second (the second-highest valid score), divided by
    (std + eps) of the group's valid scores (unbiased std, as verl's torch.std) when scale_by_std;
    every other completion gets 0. A tie for the maximum gives every member 0 (verl's topk gives the
    tied winner r_max - r_second = 0 too), and so does a group with one valid member (verl raises;
    our convention, as `group_mean`). s = score + per-row sum of kl_reward, as `group_mean`.

    inp.scores [N], inp.mask [N, T], inp.group_ids [N], inp.kl_reward [N, T]. Returns advantages
    [N, T] (0 on padding, NaN on a NaN-score row), returns None. Use with `normalizer: none`: the std
    division is here, over the group's *scores* (a group_std normalizer would divide by the std of
    the mostly-zero advantages instead). Source: verl `compute_grpo_passk_outcome_advantage`
    (norm_adv_by_std_in_grpo=True, epsilon 1e-6), after arXiv 2503.19595.
    Raises ValueError on shapes that break the contract.
    """
    s = sequence_scores(inp).double()  # [N]
    valid = ~torch.isnan(s)
    _, inv = torch.unique(inp.group_ids, return_inverse=True)  # [N] -> 0..P-1
    P = int(inv.max()) + 1 if inv.numel() else 0
    neg = torch.full((P,), float("-inf"), dtype=s.dtype, device=s.device)
    sv = torch.where(valid, s, torch.full_like(s, float("-inf")))  # NaN rows never win
    top = neg.clone().scatter_reduce(0, inv, sv, reduce="amax")  # [P] group max
    is_top = valid & (sv == top[inv])  # [N]
    n_top = torch.zeros(P, dtype=s.dtype, device=s.device).index_add_(0, inv, is_top.to(s.dtype))  # [P]
    rest = torch.where(is_top, torch.full_like(s, float("-inf")), sv)
    second = neg.clone().scatter_reduce(0, inv, rest, reduce="amax")  # [P] best of the others
    winner = is_top & (n_top[inv] == 1) & torch.isfinite(second[inv])  # unique max, >= 2 valid members
    adv = torch.where(winner, s - second[inv], torch.zeros_like(s))  # [N]
    if scale_by_std:
        _, std, _ = group_stats(s, inp.group_ids)  # [N] unbiased, NaN rows left out
        adv = adv / (std + eps)
    return AdvantageResult(_broadcast(adv, s, inp.mask).to(sequence_scores(inp).dtype), None)


def _check_k(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    k = params["k"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def _comb(n: Tensor, k: int) -> Tensor:
    """Binomial coefficient C(n, k) for a float tensor n of integers (0 where n < k), in float64."""
    n = n.double()
    out = torch.exp(torch.lgamma(n + 1) - torch.lgamma(torch.clamp(n - k, min=0) + 1) - math.lgamma(k + 1))
    return torch.where(n >= k, torch.round(out), torch.zeros_like(out))


@register("advantage", "pass_at_k_analytic", check=_check_k, level="sequence", needs_groups=True)
def pass_at_k_analytic(inp: AdvantageInputs, *, k: int = 4) -> AdvantageResult:
    """Analytic pass@k advantage for binary rewards (Chen et al. arXiv 2508.10751 §3.3): in a group
    of N valid completions with N_neg wrong ones, the expected pass@k reward of a random k-subset is
    R = 1 - C(N_neg, k) / C(N, k), sigma = sqrt(R (1 - R)), and
    A_correct = (1 - R) / sigma (eq. 14), A_wrong = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma
    (eq. 15). With k = 1 this is GRPO's (s - mean) / std with the population std. A group with
    sigma = 0 gets 0 (all wrong; or fewer than k wrong, so every k-subset passes), and k > N is
    clamped to N (the one k-subset is the whole group): our conventions.

    Correct = score == 1, anything else wrong (as zoo's `accuracy`; scores are the weighted reward:
    use one binary correctness reward, weight 1, `objective_norm: none`). inp.scores [N], inp.mask [N, T],
    inp.group_ids [N]. Returns advantages [N, T] (0 on padding, NaN on a NaN-score row), returns
    None. kl_reward is not used (the estimator is defined on the binary reward).
    Raises ValueError on bad shapes.
    """
    s = inp.scores.double()  # [N]
    if s.dim() != 1 or tuple(inp.group_ids.shape) != tuple(s.shape) or inp.mask.shape[0] != s.shape[0]:
        raise ValueError(
            f"scores [N], group_ids [N], mask [N, T] expected, got {tuple(s.shape)}, "
            f"{tuple(inp.group_ids.shape)}, {tuple(inp.mask.shape)}"
        )
    valid = ~torch.isnan(s)
    correct = (valid & (s == 1)).double()  # [N]; like `accuracy`: 1.0 is correct, anything else wrong
    _, _, n = group_stats(s, inp.group_ids)  # [N] valid members of the row's group
    _, inv = torch.unique(inp.group_ids, return_inverse=True)
    P = int(inv.max()) + 1 if inv.numel() else 0
    n_pos = torch.zeros(P, dtype=s.dtype, device=s.device).index_add_(0, inv, correct)[inv]  # [N]
    n_neg = n - n_pos
    kk = torch.clamp(torch.full_like(n, float(k)), max=n.clamp(min=1))  # [N], k <= N
    adv = torch.zeros_like(s)
    for kv in torch.unique(kk).tolist():  # C(., k) needs an integer k: one pass per distinct k
        sel = kk == kv
        kv = int(kv)
        r = 1 - _comb(n_neg, kv) / _comb(n, kv)  # [N]
        sigma = torch.sqrt(r * (1 - r))
        cond = _comb(n_neg - 1, kv - 1) / _comb(n - 1, kv - 1).clamp(min=1)  # P(subset all wrong | this one wrong)
        a_pos = (1 - r) / sigma
        a_neg = (1 - r - cond) / sigma
        a = torch.where(correct == 1, a_pos, a_neg)
        adv = torch.where(sel & (sigma > 0), a, adv)
    return AdvantageResult(_broadcast(adv, s, inp.mask).to(torch.promote_types(inp.scores.dtype, torch.float32)), None)
