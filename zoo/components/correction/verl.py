"""verl's rollout-correction options that zoo's `tis` / `rs` do not cover (kind "correction"): the
divergence statistics of its rejection sampler (k2, k3 per token, summed, averaged or at their
maximum over a sequence) and the batch-normalised truncated IS weight (`rollout_is_batch_normalize`).

With log rho_t = logp_old_t - logp_rollout_t (clamped to [-20, 20]):

    k1 = -log rho    k2 = (log rho)^2 / 2    k3 = rho - 1 - log rho (>= 0; KL(rollout || old) in expectation)

A token (level `token`) or a whole row (`sum`, `mean`, `max` of the row's real tokens) is rejected,
weight 0, when the statistic exceeds `threshold`; else 1. verl drops a rejected token from the loss
mask; here it keeps counting in the aggregation's denominator (as every zoo correction; docs/reference/components.md).

Sources: verl `rollout_corr_helper.compute_rollout_rejection_mask` options token_k2 / token_k3 /
seq_sum_k2 / seq_sum_k3 / seq_mean_k2 / seq_mean_k3 / seq_max_k2 / seq_max_k3 (upper bounds only),
from verl's docstring and tests as read, not its function body; `rollout_is_batch_normalize`
(w / mean w over the batch) from verl's rollout-correction docs, its code not read. The k1 options are
zoo's `rs` (ratio bounds).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.correction.base import LOG_RATIO_CLAMP, _check_tis, level_log_ratio, log_ratio
from zoo.components.stats import sanitize
from zoo.core.registry import register
from zoo.core.types import TermInputs

STATISTICS = ("k2", "k3")
REDUCTIONS = ("token", "sum", "mean", "max")


def divergence(lr: Tensor, statistic: str) -> Tensor:
    """Per-token k2 = lr^2 / 2 or k3 = e^lr - 1 - lr of the log-ratio lr [n, T] (clamped to [-20, 20])."""
    x = lr.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if statistic == "k2":
        return 0.5 * x**2
    if statistic == "k3":
        return torch.expm1(x) - x
    raise ValueError(f"statistic {statistic!r}: expected one of {', '.join(STATISTICS)}")


def reduce_rows(d: Tensor, mask: Tensor, level: str) -> Tensor:
    """d [n, T] (0 on padding) at `level`, broadcast to [n, T]: token, or the row's sum / mean / max
    over its real tokens (a row without real tokens: 0)."""
    if level == "token":
        return d
    if level == "sum":
        r = d.sum(1, keepdim=True)
    elif level == "mean":
        r = d.sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)
    elif level == "max":
        r = torch.where(mask, d, torch.full_like(d, -math.inf)).amax(1, keepdim=True).clamp(min=0)
    else:
        raise ValueError(f"level {level!r}: expected one of {', '.join(REDUCTIONS)}")
    return r.expand_as(d)


def _check_rs_div(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["statistic"] not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)} (k1 is `rs`), got {params['statistic']!r}")
    if params["level"] not in REDUCTIONS:
        raise ValueError(f"level must be one of {', '.join(REDUCTIONS)}, got {params['level']!r}")
    t = params["threshold"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
        raise ValueError(f"threshold must be a finite number > 0 (an upper bound on the statistic), got {t!r}")


@register("correction", "rs_divergence", check=_check_rs_div, reads=("logp_old", "logp_rollout"))
def rs_divergence(inp: TermInputs, *, threshold: float, statistic: str = "k3", level: str = "token") -> Tensor:
    """Rejection by a divergence statistic (module docstring): 1 where k2 / k3 of the token (`token`)
    or the row's `sum` / `mean` / `max` of it is <= threshold, else 0; verl `rollout_rs`
    token_k3, seq_sum_k3, seq_mean_k3, seq_max_k2, seq_max_k3 ... with `rollout_rs_threshold`.
    inp.logp_old, inp.logp_rollout, inp.mask: [n, T]. Returns the detached 0/1 weight [n, T], 0 on
    padding. Raises ValueError without logp_rollout."""
    m, lr = log_ratio(inp, "rs_divergence")
    d = sanitize(divergence(lr, statistic), m)
    return sanitize((reduce_rows(d, m, level) <= threshold).float(), m)


def _check_tis_norm(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _check_tis(params, context)
    if params["scope"] not in ("step", "micro"):
        raise ValueError(f"scope must be step or micro, got {params['scope']!r}")


@register("correction", "tis_normalized", check=_check_tis_norm, reads=("logp_old", "logp_rollout"), selects=True)
def tis_normalized(
    inp: TermInputs, *, C: float = 2.0, C_low: float | None = None, level: str = "token", scope: str = "step"
) -> Tensor:
    """`tis`'s weight divided by its mean over the optimizer step (verl `rollout_is_batch_normalize`:
    the weights average 1): over the step's real tokens at level `token`, over its sequences (one
    weight per row) at `sequence` / `geometric`. Over the whole step on every rank (`selects=True`;
    `scope: micro`: over the micro-batch). inp: [n, T]. Returns the detached weight [n, T], 0 on padding.
    Raises ValueError without the step view or logp_rollout."""
    v = inp.step
    if v is None or "logp_rollout" not in v.fields:
        raise ValueError("correction 'tis_normalized' needs the step view with the sampler's log-probs")
    real = v.fields["mask"].bool()
    lr = sanitize(v.fields["logp_old"].double() - v.fields["logp_rollout"].double(), real)
    lv = level_log_ratio(lr, real, level).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    lo = None if C_low is None else math.log(C_low)
    w = sanitize(torch.exp(lv.clamp(min=lo, max=math.log(C))), real)  # [M, T], tis's weight
    if level == "token":
        mean = w[real].mean() if real.any() else w.new_ones(())
    else:
        has = real.any(1)
        mean = w[has].amax(1).mean() if has.any() else w.new_ones(())  # one weight per row (constant on it)
    return v.local((w / mean).float(), like=inp.logp)
