"""From reward columns to the scalar score each completion trains on: length shaping, objective
normalisation and the weighted sum, the per-row metrics sampling filters read, and the filters.
Shapes: N completions, T completion tokens, K reward columns."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import torch
from torch import Tensor

from zoo.components.objective import combine_objectives
from zoo.components.stats import group_constant
from zoo.core.batch import Batch
from zoo.core.types import LengthRows
from zoo.rewards.compute import check_weighted
from zoo.step.types import Slots


def length_shaping(
    batch: Batch,
    objectives: Tensor,
    names: list[str],
    weights: list[float],
    slots: Slots,
    max_new_tokens: int,
    accuracy_col: int | None = None,
) -> tuple[Batch, Tensor, list[str], list[float], dict[str, float]]:
    """The length slot's components in order: each may add an objective column (weight 1) and/or
    clear loss-mask rows (e.g. DAPO's overlong filter). Each gets the policy's own tokens per row
    (`Batch.policy_tokens` [N], not the attention extent `lengths`: environment tokens are not the
    policy's length) and `LengthRows`: the group ids and
    the raw reward columns' per-row metrics (`objective_metrics`, with `accuracy` from column
    `accuracy_col`), e.g. for Kimi k1.5's length reward within a group.

    objectives: [N, K] raw reward columns in the order of `names`/`weights`. Returns (batch with the
    new loss mask, objectives [N, K'], names, weights, {"loss/masked_rows_frac"})."""
    cols, names, weights = [objectives], list(names), list(weights)
    mask = batch.loss_mask
    rows = LengthRows(group_ids=batch.group_ids, metrics=objective_metrics(objectives, names, accuracy_col))
    for comp in slots.length:
        res = comp(batch.policy_tokens, batch.truncated, max_new_tokens, rows)  # the policy's own tokens
        if res.column is not None:
            cols.append(res.column.to(objectives.dtype)[:, None])  # [N, 1]
            names.append(comp.name)
            weights.append(1.0)
        if res.keep is not None:
            mask = mask & res.keep[:, None].to(mask.device)
    frac = float((~mask.any(1) & batch.loss_mask.any(1)).float().mean())
    return replace(batch, loss_mask=mask), torch.cat(cols, dim=1), names, weights, {"loss/masked_rows_frac": frac}


def objective_scores(
    batch: Batch, obj: Tensor, names: list[str], weights: list[float], slots: Slots
) -> tuple[Batch, dict[str, float]]:
    """Objective normaliser, then the weighted sum -> `batch.scores` [N] (and `batch.objectives`).

    obj: [N, K] columns (NaN where a reward could not be computed). Logs the reward that trains (C11):
    reward/total = sum_k w_k mean(R_k), each column's mean, reward/failed (rows with a NaN column) and
    groups/zero_var_frac (groups whose weighted raw reward is constant); column means in float64.
    Raises RewardError when a weight x value exceeds zoo.rewards.compute.REWARD_LIMIT."""
    check_weighted(obj, names, weights)  # |w x value| within REWARD_LIMIT, or RewardError
    w = torch.tensor(weights, dtype=obj.dtype)
    normed = slots.objective_norm(obj, batch.group_ids)  # [N, K]
    scores = combine_objectives(normed, w)  # [N]
    metrics: dict[str, float] = {}
    for k, n in enumerate(names):
        metrics[f"reward/{n}"] = nanmean(obj[:, k])
    metrics["reward/total"] = float(sum(weights[k] * metrics[f"reward/{n}"] for k, n in enumerate(names)))
    metrics["reward/failed"] = float(torch.isnan(obj).any(1).sum())
    constant = group_constant(combine_objectives(obj, w), batch.group_ids)  # [N]
    metrics["groups/zero_var_frac"] = group_frac(constant, batch.group_ids)
    return replace(batch, objectives=obj, scores=scores), metrics


def nanmean(x: Tensor) -> float:
    """Mean of the non-NaN entries of `x`, computed in float64 (a float32 sum of large rewards would
    overflow); NaN when there are none."""
    ok = ~torch.isnan(x)
    return float(x[ok].double().mean()) if ok.any() else float("nan")


def group_frac(flag_per_row: Tensor, group_ids: Tensor) -> float:
    """Fraction of groups whose (group-constant) flag [N] is true."""
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    first = torch.full((len(uniq),), len(group_ids), dtype=torch.long).scatter_reduce(
        0, inv, torch.arange(len(group_ids)), reduce="amin"
    )
    return float(flag_per_row[first].float().mean()) if len(uniq) else 0.0


def objective_metrics(objectives: Tensor, names: list[str], accuracy_col: int | None) -> dict[str, Tensor]:
    """[N] tensors per row: each objective column [N, K] by name, and `accuracy` (column
    `accuracy_col` == 1, the reward that judges correctness; NaN where unscored; absent when None)."""
    out = {n: objectives[:, k] for k, n in enumerate(names)}
    if accuracy_col is not None:
        c = objectives[:, accuracy_col]  # NaN (could not be scored) stays NaN: left out, not counted wrong
        out["accuracy"] = torch.where(torch.isnan(c), c, (c == 1.0).float())
    return out


def per_row_metrics(
    objectives: Tensor, names: list[str], scores: Tensor, accuracy_col: int | None
) -> dict[str, Tensor]:
    """[N] tensors a sampling filter may name: each objective by name, `reward` (the score) and
    `accuracy` (column `accuracy_col` == 1, the reward that judges correctness; None: no accuracy)."""
    return {**objective_metrics(objectives, names, accuracy_col), "reward": scores}


def keep_rows(metrics_per_row: Mapping[str, Tensor], group_ids: Tensor, slots: Slots) -> Tensor:
    """[N] bool: rows every sampling filter keeps (whole groups)."""
    keep = torch.ones_like(group_ids, dtype=torch.bool)
    for f in slots.filter:
        keep &= f(metrics_per_row, group_ids)
    return keep
