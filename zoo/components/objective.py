"""Objective normalisation (kind "objective_norm": `fn(objectives [N, K], group_ids [N]) -> [N, K]`)
and `combine_objectives`, which turns the K normalised objectives into one score per completion.

A NaN objective (a reward that could not score that row) never changes another row, and it erases
the row's other objectives only where no neutral value exists (case B19):
- `none` (raw values): 0 would be a real score, so the NaN stays and `combine_objectives` gives the
  row a NaN score, which the advantage estimators leave out of their groups (advantage 0);
- `group_zscore`: each column's group statistics use that column's valid values only, and a NaN
  entry of a row with at least one valid objective becomes 0, the group mean in z units (neither
  rewarded nor punished on that objective), so the row keeps its other objectives. A row whose
  every objective is NaN stays NaN.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from zoo.components.normalize import check_eps
from zoo.components.stats import group_constant, group_stats
from zoo.core.registry import register


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
    equal within a group (or that group has one valid row) gives exactly 0 there, never NaN. NaN
    entries are left out of their column's statistics only; in a row with another valid objective
    they become 0 (the group mean: neutral), a row with no valid objective stays NaN (module
    docstring, case B19). Returns [N, K]. Case C15.
    Source: MO-GRPO arXiv 2509.22047 (A_i = sum_k (R_k,i - mean_k) / std_k within the group). (TRL's
    GRPOTrainer sums even raw rewards with nansum, a missing reward counting as 0; we do that only
    where 0 is neutral, as here.)
    Raises ValueError on bad shapes.
    """
    _validate(objectives, group_ids)
    if not objectives.is_floating_point():
        objectives = objectives.float()
    missing = torch.isnan(objectives)  # [N, K]
    scored = ~missing.all(dim=1)  # [N]: rows with at least one valid objective
    cols = []
    for k in range(objectives.shape[1]):
        x = objectives[:, k]  # [N], NaN entries are left out of the statistics by group_stats
        mean, std, _ = group_stats(x, group_ids)  # [N] each
        z = (x - mean) / (std + eps)  # [N]
        flat = group_constant(x, group_ids) & ~missing[:, k]  # [N]
        z = torch.where(flat, torch.zeros_like(z), z)
        cols.append(torch.where(missing[:, k] & scored, torch.zeros_like(z), z))  # neutral, not erased
    return torch.stack(cols, dim=1) if cols else objectives.clone()  # [N, K]


def combine_objectives(objectives: Tensor, weights: Tensor | Sequence[float] | None = None) -> Tensor:
    """Weighted sum of the (normalised) objectives: one score per completion.

    objectives: [N, K]; weights: [K] (None = all 1). Returns scores [N]; a row with any NaN
    objective gives NaN, even where its weight is 0 (a normalizer that has a neutral value has
    already replaced the NaN entries it can, module docstring). Source: MO-GRPO arXiv 2509.22047 (sum of
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
