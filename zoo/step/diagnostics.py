"""Mechanism diagnostics of one step, over the rows that train (after the filters, after the
advantages): which objective drives the update and whether length goes with reward.

    adv/corr/<objective>       corr(token-mean advantage, objective centred within its group)
                               (MO-GRPO arXiv:2509.22047: GRPO's correlations concentrate on the
                               high-variance reward, MO-GRPO's are even)
    completion/len_correct     mean length of the correct completions (Dr. GRPO arXiv:2503.20783,
    completion/len_incorrect   its length figure: under per-sequence normalisation wrong answers grow)
    completion/len_reward_corr corr(length, weighted raw reward), both centred within the group
    gold/<name>                mean of a gold reward the run names under `gold:`, scored on every
                               first-round completion but never trained on (Gao et al. arXiv:2210.10760)

Every correlation is Pearson's over the rows where both values are finite; NaN when it is undefined
(fewer than two rows, or a constant side). Under data parallelism the step's rows span ranks: each
rank centres its own groups (a group never spans ranks) and every rank gathers all rows, so all ranks
log the same values. Shapes: N completions, T completion tokens, K objective columns.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor

from zoo.core import dist
from zoo.core.batch import Batch
from zoo.rewards.compute import compute_rewards


def group_centred(x: Tensor, group_ids: Tensor) -> Tensor:
    """x [N] (float, NaN = missing) minus the mean of its group's finite values -> [N] (NaN stays NaN;
    a group without a finite value stays NaN). group_ids: [N] ints."""
    x = x.double()
    ok = torch.isfinite(x)
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    sums = torch.zeros(len(uniq), dtype=torch.float64).index_add(0, inv, torch.where(ok, x, torch.zeros_like(x)))
    counts = torch.zeros(len(uniq), dtype=torch.float64).index_add(0, inv, ok.double())
    mean = sums / counts.clamp(min=1)
    return torch.where(ok, x - mean[inv], torch.full_like(x, math.nan))


def pearson(x: Tensor, y: Tensor) -> float:
    """Pearson's correlation of x [N] and y [N] over the rows where both are finite; NaN with fewer
    than two such rows or when either side is constant there."""
    x, y = x.double(), y.double()
    ok = torch.isfinite(x) & torch.isfinite(y)
    if int(ok.sum()) < 2:
        return math.nan
    x, y = x[ok], y[ok]
    a, b = x - x.mean(), y - y.mean()
    sa, sb = float(torch.sqrt((a * a).sum())), float(torch.sqrt((b * b).sum()))
    n = math.sqrt(len(x))
    if sa <= 1e-9 * n * (1.0 + float(x.abs().max())) or sb <= 1e-9 * n * (1.0 + float(y.abs().max())):
        return math.nan  # a constant side (up to float rounding: three 0.9s do not centre to exactly 0)
    return float((a * b).sum()) / (sa * sb)


#: the fixed columns of `row_table`, then the K centred objectives and the centred weighted raw reward
ADV, LEN, LEN_CENTRED, CORRECT = range(4)
FIXED = 4


def row_table(batch: Batch, n_rewards: int, weights: Sequence[float], accuracy_col: int | None) -> Tensor:
    """This rank's rows as one float64 table [N, 4 + K + 1]: token-mean advantage (NaN for a row
    without a real token), length, length centred within its group, correct (1/0; NaN when unscored
    or without an accuracy reward), the K objective columns centred within their group, and the
    weighted raw reward (sum over the first `n_rewards` columns of w_k R_k) centred within its group."""
    mask = batch.loss_mask
    n_tok = mask.sum(1)
    adv = (batch.advantages.double() * mask).sum(1) / n_tok.clamp(min=1)
    adv = torch.where(n_tok > 0, adv, torch.full_like(adv, math.nan)).cpu()
    obj = batch.objectives.double().cpu()
    gid = batch.group_ids.cpu()
    length = batch.policy_tokens.double().cpu()  # the policy's own tokens
    if accuracy_col is None:
        correct = torch.full((batch.size,), math.nan, dtype=torch.float64)
    else:
        c = obj[:, accuracy_col]
        correct = torch.where(torch.isnan(c), c, (c == 1.0).double())
    w = torch.tensor(list(weights)[:n_rewards], dtype=torch.float64)
    raw = (obj[:, :n_rewards] * w).sum(1) if n_rewards else torch.full((batch.size,), math.nan, dtype=torch.float64)
    cols = [adv, length, group_centred(length, gid), correct]
    cols += [group_centred(obj[:, k], gid) for k in range(obj.shape[1])]
    cols.append(group_centred(raw, gid))
    return torch.stack(cols, 1)


def step_diagnostics(
    batch: Batch | None, names: Sequence[str], weights: Sequence[float], n_rewards: int, accuracy_col: int | None
) -> dict[str, float]:
    """The module's metrics for the rows that train. A collective under data parallelism (every rank
    calls it, also with an empty batch).

    batch: after the advantages (advantages [N, T], objectives [N, K], policy_tokens [N], group_ids [N]), or
    None / empty when nothing trains on this rank. names: the K objective columns (the rewards, then
    the length-shaping columns); weights: their K weights; n_rewards: how many of them are rewards
    (the weighted raw reward of `len_reward_corr` sums those); accuracy_col: the column of the
    reward registered with `accuracy=True` (score 1.0 = correct), or None: no len_correct/incorrect.
    Returns {} when no rank has a row."""
    K = len(names)
    has_rows = batch is not None and batch.size > 0 and batch.advantages is not None and batch.objectives is not None
    local = (
        row_table(batch, n_rewards, weights, accuracy_col)
        if has_rows
        else torch.zeros(0, FIXED + K + 1, dtype=torch.float64)
    )
    rows = torch.cat(dist.all_gather_object(local))  # [N_global, 4 + K + 1]
    if rows.shape[0] == 0:
        return {}
    adv = rows[:, ADV]
    out = {f"adv/corr/{n}": pearson(adv, rows[:, FIXED + k]) for k, n in enumerate(names)}
    out["completion/len_reward_corr"] = pearson(rows[:, LEN_CENTRED], rows[:, FIXED + K])
    if accuracy_col is not None:
        for key, flag in (("completion/len_correct", 1.0), ("completion/len_incorrect", 0.0)):
            sel = rows[:, CORRECT] == flag
            out[key] = float(rows[sel, LEN].mean()) if bool(sel.any()) else math.nan
    return out


def gold_metrics(gold: Sequence[Any], texts: Sequence[str], rows: Sequence[dict]) -> dict[str, float]:
    """{"gold/<name>": mean over the completions it could score (NaN: none)} for each built gold reward
    (`resolve_rewards(cfg.gold)`); {} without gold rewards. texts/rows: the N completions and their
    dataset rows. Raises what `compute_rewards` raises (RewardError for a broken return value)."""
    if not gold:
        return {}
    obj = compute_rewards(gold, texts, rows).objectives  # [N, G_gold]
    out = {}
    for k, fn in enumerate(gold):
        col = obj[:, k]
        ok = ~torch.isnan(col)
        out[f"gold/{fn.name}"] = float(col[ok].mean()) if bool(ok.any()) else math.nan
    return out
