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
    batch: Batch,
    obj: Tensor,
    names: list[str],
    weights: list[float],
    slots: Slots,
    accuracy_col: int | None = None,
) -> tuple[Batch, dict[str, float]]:
    """Objective normaliser, then the weighted sum -> `batch.scores` [N] (and `batch.objectives`).

    obj: [N, K] columns (NaN where a reward could not be computed). Logs the reward that trains (C11):
    reward/total = sum_k w_k mean(R_k), each column's mean, reward/failed (rows with a NaN column),
    groups/zero_var_frac (groups whose weighted raw reward is constant) and the signal per group
    (`signal_metrics`: groups/signal_frac, groups/correct_signal_frac from column `accuracy_col`);
    column means in float64. Raises RewardError when a weight x value exceeds
    zoo.rewards.compute.REWARD_LIMIT."""
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
    metrics.update(signal_metrics(metrics["groups/zero_var_frac"], obj, batch.group_ids, accuracy_col))
    return replace(batch, objectives=obj, scores=scores), metrics


def signal_metrics(zero_var_frac: float, obj: Tensor, group_ids: Tensor, accuracy_col: int | None) -> dict[str, float]:
    """The fraction of groups that carried a learning signal. A group-relative advantage, (r_i - mean) / std
    over the group (GRPO: Shao et al. 2024, arXiv:2402.03300, section 4.1.2), is 0 for every member of a
    group whose rewards are all alike, so such a group adds no gradient; DAPO's dynamic sampling (Yu et al.
    2025, arXiv:2503.14476, section 3.2) drops the groups whose accuracy is all 0 or all 1 for that reason.

    groups/signal_frac = 1 - groups/zero_var_frac: groups whose weighted raw reward varies.
    groups/correct_signal_frac (only with a correctness reward, column `accuracy_col` of obj [N, K]):
    groups whose correctness varies (some member correct, some not; NaN rows left out, a group with
    fewer than 2 scored members has none). A format or length reward can make a group vary while no
    answer in it is right: signal_frac counts that group, correct_signal_frac does not."""
    out = {"groups/signal_frac": 1.0 - zero_var_frac}
    if accuracy_col is not None:
        correct = objective_metrics(obj, [], accuracy_col)["accuracy"]  # [N] 1/0, NaN where unscored
        out["groups/correct_signal_frac"] = 1.0 - group_frac(group_constant(correct, group_ids), group_ids)
    return out


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
