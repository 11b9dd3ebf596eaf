"""Objective normalisation (kind "objective_norm": `fn(objectives [N, K], group_ids [N]) -> [N, K]`)
and `combine_objectives`, which turns the K normalised objectives into one score per completion.

A row with any NaN objective (a reward that could not be computed) is left out of the statistics of
every column, so it changes no other row; its NaN entries stay NaN and `combine_objectives` gives it
a NaN score, which the advantage estimators leave out of their groups.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from zoo.components.normalize import check_eps
from zoo.components.stats import group_constant, group_stats
from zoo.registry import register


def _validate(objectives: Tensor, group_ids: Tensor) -> None:
    if objectives.dim() != 2 or tuple(group_ids.shape) != (objectives.shape[0],):
        raise ValueError(
            f"objectives {tuple(objectives.shape)} must be [N, K] and group_ids {tuple(group_ids.shape)} [N]"
        )


@register("objective_norm", "none")
def identity(objectives: Tensor, group_ids: Tensor) -> Tensor:
    """Objectives unchanged (GRPO sums the raw rewards). objectives: [N, K]; group_ids: [N]
    (unused). Returns [N, K]. Source: GRPO arXiv 2402.03300 §4.1.2. Raises ValueError on bad shapes."""
    _validate(objectives, group_ids)
    return objectives


@register("objective_norm", "group_zscore", check=check_eps, needs_groups=True)
def group_zscore(objectives: Tensor, group_ids: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Z-score each objective within its group: (x - mean) / (std + eps), unbiased std.

    objectives: [N, K]; group_ids: [N] (any order, any values). A column whose valid values are
    equal within a group (or that group has one valid row) gives exactly 0 there, never NaN. Rows
    with any NaN are left out of all statistics; their NaN entries stay NaN. Returns [N, K]. Case C15.
    Source: MO-GRPO arXiv 2509.22047 (A_i = sum_k (R_k,i - mean_k) / std_k within the group).
    Raises ValueError on bad shapes.
    """
    _validate(objectives, group_ids)
    if not objectives.is_floating_point():
        objectives = objectives.float()
    valid = ~torch.isnan(objectives).any(dim=1)  # [N]
    nan = torch.full_like(objectives[:, 0], float("nan"))  # [N]
    cols = []
    for k in range(objectives.shape[1]):
        x = objectives[:, k]  # [N]
        xv = torch.where(valid, x, nan)  # [N], invalid rows out of the statistics
        mean, std, _ = group_stats(xv, group_ids)  # [N] each
        z = (x - mean) / (std + eps)  # [N]
        flat = group_constant(xv, group_ids) & ~torch.isnan(x)  # [N]
        cols.append(torch.where(flat, torch.zeros_like(z), z))
    return torch.stack(cols, dim=1) if cols else objectives.clone()  # [N, K]


def combine_objectives(objectives: Tensor, weights: Tensor | Sequence[float] | None = None) -> Tensor:
    """Weighted sum of the (normalised) objectives: one score per completion.

    objectives: [N, K]; weights: [K] (None = all 1). Returns scores [N]; a row with any NaN
    objective gives NaN, even where its weight is 0. Source: MO-GRPO arXiv 2509.22047 (sum of
    per-objective z-scores); weighted sum as in TRL `reward_weights`.
    Raises ValueError when objectives is not [N, K] or weights is not [K].
    """
    if objectives.dim() != 2:
        raise ValueError(f"objectives must be [N, K], got {tuple(objectives.shape)}")
    k = objectives.shape[1]
    if weights is None:
        return objectives.sum(dim=1)  # [N]
    w = torch.as_tensor(weights, dtype=objectives.dtype, device=objectives.device)  # [K]
    if tuple(w.shape) != (k,):
        raise ValueError(f"weights must be [K] = [{k}], got {tuple(w.shape)}")
    return (objectives * w).sum(dim=1)  # [N]
