"""Rollout corrections (kind "correction", slot `correction`, a list): a detached per-token weight
`[n, T]` on the clip rule's term, from the ratio between the trainer and the sampler.

    rho_t = pi_old(y_t) / pi_rollout(y_t) = exp(logp_old_t - logp_rollout_t)

logp_old is the trainer's own forward at rollout time (the step computes it whenever a component
reads it, zoo/step/forwards.py), logp_rollout the sampler's log-probs of the drawn tokens (the
generator reports them on the Batch). When the sampler's numerics equal the trainer's, rho = 1 and
every correction below gives exactly 1.

Levels: `token` uses rho_t; `sequence` the product over the completion's real tokens,
rho_seq = exp(sum_t log rho_t) (verl rollout_is "sequence", TRL `sequence_*`); `geometric` the
geometric mean exp(mean_t log rho_t) (NeMo-RL's `sequence_mean`). A sequence-level weight is
broadcast over the row's real tokens. Length dependence: the product compounds every token's
mismatch, so its log grows with the length (L tokens each with log rho = 0.1: exp(0.1 L), 2.718 at
L = 10, 148 at L = 50), while the geometric mean does not (exp(0.1) = 1.105 for any L) and so cannot
flag one far-off token in a long row (log rho = 2 once among 49 zeros: product e^2 = 7.39, geometric
e^0.04 = 1.041). Every log-ratio is clamped to
[-20, 20] before `exp` (verl's safety bound), so the weights stay finite. Padded slots of both
log-probs are selected away first (NaN/inf there reach neither the weight nor the loss); weights
are 0 on padding (the clip term is 0 there too).

A weight of 0 removes a token's policy gradient; the token still counts in the aggregation's
denominator (as in TRL, whose IS ratio multiplies the per-token loss). verl's rejection instead
drops it from the loss mask.

Sources: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(blog, Aug. 2025; truncated importance sampling, TIS); TRL `GRPOConfig.vllm_importance_sampling_mode` (token_truncate
/ token_mask / sequence_truncate / sequence_mask, cap 3.0); IcePop (Ling Team, Ring-1T, arXiv
2510.18855: token mask outside [alpha, beta]); verl rollout correction (Liu, Li et al. 2025, "When
Speed Kills Stability"; `rollout_is`, `rollout_rs` token / sequence / geometric, threshold 2.0,
lower bound 1 / upper by default).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.stats import as_bool, check_same_shape, sanitize
from zoo.core.registry import register
from zoo.core.types import TermInputs

LOG_RATIO_CLAMP = 20.0  # verl's safety bound: weights within [exp(-20), exp(20)]
LEVELS = ("token", "sequence", "geometric")
RS_LEVELS = LEVELS


def log_ratio(inp: TermInputs, name: str) -> tuple[Tensor, Tensor]:
    """(mask [n, T] bool, log rho [n, T] = logp_old - logp_rollout, 0 on padding), detached.

    Raises ValueError when the batch has no sampler log-probs (`logp_rollout` is None: the
    generator does not report them) or when shapes differ."""
    if inp.logp_rollout is None:
        raise ValueError(
            f"correction {name!r} needs the sampler's log-probs (logp_rollout), and this "
            "generator does not report them: use a generator that does (sampling.backend)"
        )
    check_same_shape(logp_old=inp.logp_old, logp_rollout=inp.logp_rollout, mask=inp.mask)
    m = as_bool(inp.mask)
    old = sanitize(inp.logp_old.detach().float(), m)
    roll = sanitize(inp.logp_rollout.detach().float().to(old.device), m)
    return m, sanitize(old - roll, m)


def level_log_ratio(lr: Tensor, mask: Tensor, level: str) -> Tensor:
    """The log-ratio at `level`, broadcast to [n, T]: `token` lr itself, `sequence` the row sum
    (log of the product of the token ratios), `geometric` the row mean over real tokens (a row
    without real tokens: 0). lr: [n, T], 0 on padding; mask: [n, T] bool. Raises ValueError for
    another level."""
    if level == "token":
        return lr
    if level == "sequence":
        return lr.sum(1, keepdim=True).expand_as(lr)
    if level == "geometric":
        return (lr.sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)).expand_as(lr)
    raise ValueError(f"level {level!r}: expected one of {', '.join(RS_LEVELS)}")


def _weight(w: Tensor, m: Tensor) -> Tensor:
    return sanitize(w, m)  # 0 on padding, finite everywhere


def _check_level(level: Any, allowed: tuple[str, ...]) -> None:
    if level not in allowed:
        raise ValueError(f"level must be one of {', '.join(allowed)}, got {level!r}")


def _check_bounds(c_low: Any, c_high: Any) -> None:
    for k, v in (("c_low", c_low), ("c_high", c_high)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{k} must be a finite number, got {v!r}")
    if not 0 <= c_low <= 1 <= c_high or c_low == c_high:
        raise ValueError(
            f"the bounds must satisfy 0 <= c_low <= 1 <= c_high with c_low < c_high (a token with "
            f"rho = 1, the sampler agreeing with the trainer, must be kept, and a band of width 0 "
            f"masks every token the sampler drew differently), got c_low={c_low}, c_high={c_high}"
        )


def _check_tis(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _check_level(params["level"], LEVELS)
    c = params["C"]
    if not isinstance(c, (int, float)) or isinstance(c, bool) or not math.isfinite(c) or c < 1:
        raise ValueError(
            f"C must be a finite number >= 1 (a cap below 1 would down-weight on-policy tokens), got {c!r}"
        )
    lo = params["C_low"]
    if lo is not None and (isinstance(lo, bool) or not isinstance(lo, (int, float)) or not 0 < lo <= 1):
        raise ValueError(
            f"C_low must be a number in (0, 1] or null (a floor above 1 would up-weight on-policy tokens), got {lo!r}"
        )


def _check_mis(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _check_level(params["level"], LEVELS)
    _check_bounds(params["c_low"], params["c_high"])


def _rs_bounds(c_low: float | None, c_high: float) -> tuple[float, float]:
    """(lower, upper) of rs: c_low None -> 1 / c_high (verl's reciprocal default)."""
    return (1.0 / c_high if c_low is None else c_low), c_high


def _check_rs(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _check_level(params["level"], RS_LEVELS)
    c_high = params["c_high"]
    if not isinstance(c_high, (int, float)) or isinstance(c_high, bool) or not c_high >= 1:
        raise ValueError(f"c_high must be a number >= 1, got {c_high!r}")
    _check_bounds(*_rs_bounds(params["c_low"], c_high))


@register("correction", "tis", check=_check_tis, reads=("logp_old", "logp_rollout"))
def tis(inp: TermInputs, *, C: float = 2.0, C_low: float | None = None, level: str = "token") -> Tensor:
    """Truncated importance sampling: w = min(rho, C) (Yao et al. 2025, "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training", C = 2; TRL `token_truncate` / `sequence_truncate`;
    verl `rollout_is`, threshold 2.0). `level: sequence` truncates the product of the row's token
    ratios, in log space: exp(min(sum_t log rho_t, log C)); `geometric` their geometric mean.
    `C_low` (None: no floor) also truncates from below, w = clamp(rho, C_low, C): TRL's
    `vllm_importance_sampling_clip_min` (clamp(min=clip_min, max=clip_max) in `_generate_and_score_completions`).

    inp.logp_old, inp.logp_rollout, inp.mask: [n, T]. Returns the detached weight [n, T], 0 on
    padding. Raises ValueError without logp_rollout."""
    m, lr = log_ratio(inp, "tis")
    lv = level_log_ratio(lr, m, level).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return _weight(torch.exp(torch.clamp(lv, min=None if C_low is None else math.log(C_low), max=math.log(C))), m)


@register("correction", "mis", check=_check_mis, reads=("logp_old", "logp_rollout"))
def mis(inp: TermInputs, *, c_low: float = 0.0, c_high: float = 3.0, level: str = "token") -> Tensor:
    """Masked importance sampling: w = rho where c_low <= rho <= c_high, else 0 (TRL `token_mask` /
    `sequence_mask`: rho above the cap 3.0 masked, no lower bound; IcePop, arXiv 2510.18855: the
    token mask outside [alpha, beta], i.e. c_low = alpha, c_high = beta). `level: sequence` tests
    and uses the product of the row's token ratios (compared in log space).

    inp.logp_old, inp.logp_rollout, inp.mask: [n, T]. Returns the detached weight [n, T], 0 on
    padding and on masked tokens. Raises ValueError without logp_rollout."""
    m, lr = log_ratio(inp, "mis")
    lv = level_log_ratio(lr, m, level)
    inside = (lv >= _log(c_low)) & (lv <= math.log(c_high))
    w = torch.exp(lv.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    return _weight(torch.where(inside, w, torch.zeros_like(w)), m)


@register("correction", "rs", check=_check_rs, reads=("logp_old", "logp_rollout"))
def rs(inp: TermInputs, *, c_high: float = 2.0, c_low: float | None = None, level: str = "token") -> Tensor:
    """Rejection sampling: w = 1 where c_low <= rho <= c_high, else 0, with rho per token, per
    sequence (the product) or the sequence's geometric mean (verl `rollout_rs` token / sequence /
    geometric; `rollout_rs_threshold` 2.0 by default, lower bound 1 / c_high when c_low is None;
    verl suggests 1.0001-1.001 for `geometric`). Bounds are compared in log space.

    inp.logp_old, inp.logp_rollout, inp.mask: [n, T]. Returns the detached 0/1 weight [n, T], 0 on
    padding. Raises ValueError without logp_rollout."""
    m, lr = log_ratio(inp, "rs")
    lo, hi = _rs_bounds(c_low, c_high)
    lv = level_log_ratio(lr, m, level)
    inside = (lv >= _log(lo)) & (lv <= math.log(hi))
    return _weight(inside.float(), m)


def _log(x: float) -> float:
    return math.log(x) if x > 0 else float("-inf")
