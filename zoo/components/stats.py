"""Masked and per-group statistics shared by the components.

Conventions (docs/concepts/algorithms.md, "Our conventions"):
- masks are 1/True on real tokens; padded slots are *selected away* with `torch.where` before any
  arithmetic, so NaN/inf there reach neither values nor gradients (case C7);
- group statistics use the unbiased (Bessel) std over the members of one group, NaN members
  (rewards that could not be computed) left out; a group with fewer than 2 valid members has std 0;
  they are computed in float64;
- a std within `REL_TOL * max(1, |mean|)` of 0 is 0 (`negligible`): equal scores over rows of
  different lengths give per-row float32 means that differ by rounding (case C17), never by design.
"""

from __future__ import annotations

import torch
from torch import Tensor

REL_TOL = 1e-6  # a statistic within REL_TOL x its scale of 0 is rounding, not signal (cases C16, C17)


def as_bool(mask: Tensor) -> Tensor:
    """A mask of any dtype as bool ([N, T] or [N])."""
    return mask if mask.dtype == torch.bool else mask != 0


def sanitize(x: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """`x` with every slot outside `mask` replaced by `fill` (select, not multiply).

    x, mask: same shape ([N, T] or [N]). Returns a tensor of x's shape and dtype."""
    return torch.where(as_bool(mask), x, torch.full_like(x, fill))


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of `x` over real slots (padding selected away first)."""
    x = sanitize(x, mask)
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `x` over real slots; 0 where there are none (never NaN). Case C9."""
    m = as_bool(mask)
    total = masked_sum(x, m, dim)
    count = m.sum() if dim is None else m.sum(dim)
    return total / count.clamp(min=1).to(total.dtype)


def masked_std(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Std of `x` over all real slots (scalar); 0 when fewer than 2 real slots."""
    m = as_bool(mask)
    n = m.sum()
    mean = masked_mean(x, m)
    var_sum = masked_sum((x - mean) ** 2, m)
    denom = (n - 1) if unbiased else n
    if denom <= 0:
        return torch.zeros((), dtype=x.dtype, device=x.device)
    return (var_sum / denom).sqrt()


def group_stats(x: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row mean, unbiased std and valid count of `x` over the row's group, computed in float64.

    x: [N] (NaN = missing, left out); group_ids: [N] integer ids in any order and any values.
    Returns (mean [N], std [N], count [N]) in x's dtype: each row gets its own group's statistics, so
    the result does not depend on row order (case C1). Groups with no valid member have mean 0;
    groups with fewer than 2 valid members have std 0. Raises ValueError unless both are [N].
    """
    if x.shape != group_ids.shape or x.dim() != 1:
        raise ValueError(f"x {tuple(x.shape)} and group_ids {tuple(group_ids.shape)} must both be [N]")
    dtype, x = x.dtype, x.double()
    _, inv = torch.unique(group_ids, return_inverse=True)  # [N] -> 0..P-1
    n_groups = int(inv.max()) + 1 if inv.numel() else 0
    valid = ~torch.isnan(x)
    xv = torch.where(valid, x, torch.zeros_like(x))
    count = torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, inv, valid.to(x.dtype))
    total = torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, inv, xv)
    mean = total / count.clamp(min=1)  # [P]
    dev = torch.where(valid, x - mean[inv], torch.zeros_like(x))
    ss = torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, inv, dev**2)
    std = torch.where(count > 1, (ss / (count - 1).clamp(min=1)).sqrt(), torch.zeros_like(ss))
    return mean[inv].to(dtype), std[inv].to(dtype), count[inv].to(dtype)


def negligible(x: Tensor, scale: Tensor, floor: float = 1.0) -> Tensor:
    """Where `x` is rounding noise next to `scale`: |x| <= REL_TOL * max(floor, |scale|) (any shape,
    broadcast). `negligible(std, mean)` says a group's values are all alike (the float64 std of
    float32 values that differ only by rounding is ~1e-8 |mean|); `negligible(mean, std, floor=0)`
    says a batch is centred. Returns bool. Source: our convention (docs/reference/components.md, cases C16/C17)."""
    return x.abs() <= REL_TOL * torch.clamp(torch.as_tensor(scale).abs(), min=floor)


def seq_value(x: Tensor, mask: Tensor) -> Tensor:
    """One value per row of a per-token tensor that is constant along real tokens (e.g. a
    sequence-level advantage broadcast over tokens): the masked mean of each row. x, mask: [N, T] -> [N]."""
    return masked_mean(x, mask, dim=-1)


def group_constant(x: Tensor, group_ids: Tensor) -> Tensor:
    """Per-row flag: True where all valid (non-NaN) members of the row's group are alike, i.e. their
    float64 unbiased std is `negligible` next to their mean (std <= 1e-6 max(1, |mean|)).

    x: [N] (NaN = missing, left out); group_ids: [N] integer ids in any order and any values.
    Returns [N] bool; groups with fewer than 2 valid members count as constant. Callers use it to
    give such groups advantage *exactly* 0: the rounded mean of equal float32 values can differ from
    them (three copies of 0.9 leave a deviation of 6e-8 and a std of 7e-8, which std + eps turns
    into an advantage of about 0.06), and so can per-row means of equal values over rows of
    different lengths (case C17); docs/algorithms "Our conventions". Raises ValueError unless both
    are [N]."""
    mean, std, _ = group_stats(x.double(), group_ids)  # [N] each, float64
    return negligible(std, mean)


def check_same_shape(**tensors: Tensor) -> None:
    """Raise ValueError unless every named tensor has the same shape (no silent broadcasting),
    naming each shape, e.g. `check_same_shape(logp=logp, mask=mask)`."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError("shape mismatch: " + ", ".join(f"{k} {s}" for k, s in shapes.items()))
