"""Advantage normalizers: `fn(adv [N, T], mask [N, T], group_ids [N]) -> [N, T]` (kind "normalizer").

All return 0 on padding (whatever the padded slots held) and keep NaN on the real tokens of NaN rows
(rewards that could not be computed); NaN rows are left out of every statistic, so they never change
another row. Statistics are computed in float64; a std that is `stats.negligible` next to its mean
counts as 0 (all alike), so rounding never becomes an advantage (cases C16, C17).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.stats import as_bool, group_stats, negligible, sanitize, seq_value
from zoo.core.registry import register


def check_eps(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    """`check` for components with an `eps` added to a std: eps must be a finite number > 0.
    Raises ValueError otherwise."""
    eps = params["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")


BATCH_LEVELS = ("token", "sequence")


def _check_batch_std(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    check_eps(params, context)
    if not isinstance(params["shift_mean"], bool):
        raise ValueError(f"shift_mean must be true or false, got {params['shift_mean']!r}")
    if params["level"] not in BATCH_LEVELS:
        raise ValueError(f"level must be one of {', '.join(BATCH_LEVELS)}, got {params['level']!r}")


def _validate(adv: Tensor, mask: Tensor, group_ids: Tensor) -> None:
    if adv.dim() != 2 or adv.shape != mask.shape or tuple(group_ids.shape) != (adv.shape[0],):
        raise ValueError(
            f"adv {tuple(adv.shape)} and mask {tuple(mask.shape)} must be [N, T] and group_ids "
            f"{tuple(group_ids.shape)} must be [N]"
        )


@register("normalizer", "none")
def identity(adv: Tensor, mask: Tensor, group_ids: Tensor) -> Tensor:
    """Identity: advantages unchanged on real tokens, 0 on padding.

    adv: [N, T]; mask: [N, T]; group_ids: [N] (unused). Returns [N, T].
    Source: Dr. GRPO arXiv 2503.20783 (no std division). Raises ValueError on bad shapes."""
    _validate(adv, mask, group_ids)
    return sanitize(adv, mask)


@register("normalizer", "group_std", check=check_eps, needs_groups=True)
def group_std(adv: Tensor, mask: Tensor, group_ids: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Divide each row by (unbiased std of the per-row sequence advantage within its group + eps).

    adv: [N, T], constant along each row's real tokens for sequence-level estimators; mask: [N, T];
    group_ids: [N] (any order, any values). The sequence advantage of a row is its masked mean
    (`stats.seq_value`), taken in float64 (so equal token values give equal row values whatever the
    row lengths); NaN rows are left out of their group's std and stay NaN. A group whose std is
    negligible (<= 1e-6 max(1, |mean|): all alike) or that has a single valid member gets exactly 0.
    Returns [N, T] in adv's dtype, 0 on padding. Cases C1, C17.
    Source: GRPO arXiv 2402.03300 §4.1.2 (A = (r - mean)/std within the group).
    Raises ValueError on bad shapes.
    """
    _validate(adv, mask, group_ids)
    a = sanitize(adv, mask).double()  # [N, T]
    seq = seq_value(a, mask)  # [N]
    mean, std, _ = group_stats(seq, group_ids)  # [N] each, float64
    flat = (negligible(std, mean) & ~torch.isnan(seq))[:, None]  # [N, 1]
    out = torch.where(flat, torch.zeros_like(a), a / (std + eps)[:, None])  # [N, T]
    return sanitize(out, mask).to(adv.dtype)


def _mean_std(values: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and unbiased std of a 1-D float64 tensor (0 and 0 for fewer than 1 / 2 values)."""
    n = values.numel()
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    return (values.mean() if n else zero), (values.std() if n > 1 else zero)


@register("normalizer", "batch_std", check=_check_batch_std)
def batch_std(
    adv: Tensor,
    mask: Tensor,
    group_ids: Tensor,
    *,
    eps: float = 1e-6,
    shift_mean: bool = False,
    level: str = "token",
) -> Tensor:
    """Whiten over the batch: (A - mean) / (std + eps), mean subtracted only when `shift_mean`.

    adv: [N, T]; mask: [N, T]; group_ids: [N] (unused). The statistics are the float64 mean and
    unbiased std over one value per real token (`level="token"`) or one value per completion
    (`level="sequence"`: the row's token-mean advantage, rows without a real token left out).
    NaN tokens (NaN rows) are left out of the statistics and stay NaN. With `shift_mean` a mean
    that is negligible next to the std (|mean| <= 1e-6 std: a centred batch, e.g. group-centred
    advantages over completions) is taken as 0, and a negligible std (all alike) gives 0 everywhere.
    Returns [N, T] in adv's dtype, 0 on padding. With shift_mean=False a zero advantage stays exactly
    0; with shift_mean and level "sequence" after a group baseline, an all-alike group stays 0
    (case C16; at level "token" it does not when lengths differ).
    Source: Ziegler et al. arXiv 1909.08593 / lm-human-preferences `whiten` (token level);
    REINFORCE++ arXiv 2501.03262 (global batch normalisation); GDPO arXiv 2601.05242 as TRL's
    GRPOTrainer `multi_objective_aggregation="normalize_then_sum"` implements it (sequence level:
    mean and std over completions). Raises ValueError on bad shapes.
    """
    _validate(adv, mask, group_ids)
    a = sanitize(adv, mask).double()  # [N, T]
    if level == "sequence":
        seq = seq_value(a, mask)  # [N]
        values = seq[as_bool(mask).any(dim=1) & ~torch.isnan(seq)]  # [M], one per completion
    else:
        values = a[as_bool(mask) & ~torch.isnan(a)]  # [M], one per real token
    mean, std = _mean_std(values)
    if shift_mean:
        mean = torch.where(negligible(mean, std, floor=0.0), torch.zeros_like(mean), mean)
        alike = negligible(std, mean) & ~torch.isnan(a)  # [N, T]: all True or none on real tokens
        centred = torch.where(alike, torch.zeros_like(a), a - mean)  # [N, T]
    else:
        centred = a
    return sanitize(centred / (std + eps), mask).to(adv.dtype)
