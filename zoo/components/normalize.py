"""Advantage normalizers: `fn(adv [N, T], mask [N, T], group_ids [N]) -> [N, T]` (kind "normalizer").

All return 0 on padding (whatever the padded slots held) and keep NaN on the real tokens of NaN rows
(rewards that could not be computed); NaN rows are left out of every statistic, so they never change
another row.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.stats import as_bool, group_constant, group_stats, masked_mean, masked_std, sanitize, seq_value
from zoo.registry import register


def check_eps(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    """`check` for components with an `eps` added to a std: eps must be a finite number > 0.
    Raises ValueError otherwise."""
    eps = params["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")


def _check_batch_std(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    check_eps(params, context)
    if not isinstance(params["shift_mean"], bool):
        raise ValueError(f"shift_mean must be true or false, got {params['shift_mean']!r}")


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
    (`stats.seq_value`); NaN rows are left out of their group's std and stay NaN. A group whose
    valid sequence advantages are all equal, or that has a single valid member, gets exactly 0.
    Returns [N, T], 0 on padding. Case C1.
    Source: GRPO arXiv 2402.03300 §4.1.2 (A = (r - mean)/std within the group).
    Raises ValueError on bad shapes.
    """
    _validate(adv, mask, group_ids)
    seq = seq_value(adv, mask)  # [N]
    _, std, _ = group_stats(seq, group_ids)  # [N]
    out = sanitize(adv, mask) / (std + eps)[:, None]  # [N, T]
    flat = (group_constant(seq, group_ids) & ~torch.isnan(seq))[:, None]  # [N, 1]
    return sanitize(torch.where(flat, torch.zeros_like(out), out), mask)


@register("normalizer", "batch_std", check=_check_batch_std)
def batch_std(
    adv: Tensor, mask: Tensor, group_ids: Tensor, *, eps: float = 1e-6, shift_mean: bool = False
) -> Tensor:
    """Whiten over the batch: (A - mean) / (std + eps) with mean and unbiased std over all real
    tokens of the batch (mean subtracted only when `shift_mean`).

    adv: [N, T]; mask: [N, T]; group_ids: [N] (unused). NaN tokens (NaN rows) are left out of the
    statistics and stay NaN. Returns [N, T], 0 on padding. With shift_mean=False a zero advantage
    stays exactly 0 (after a group estimator, an all-equal group keeps 0).
    Source: Ziegler et al. arXiv 1909.08593 / lm-human-preferences `whiten`; REINFORCE++
    arXiv 2501.03262 (global batch normalisation). Raises ValueError on bad shapes.
    """
    _validate(adv, mask, group_ids)
    a = sanitize(adv, mask)  # [N, T]
    real = as_bool(mask) & ~torch.isnan(a)  # [N, T]
    std = masked_std(a, real)  # scalar
    centred = a - masked_mean(a, real) if shift_mean else a  # [N, T]
    return sanitize(centred / (std + eps), mask)
