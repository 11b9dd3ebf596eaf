"""Length shaping (kind "length"): `fn(lengths [N], truncated [N] bool, max_new_tokens, rows) -> LengthResult`
(`rows`: a `LengthRows`, the group ids and per-row reward metrics, for shaping within a group).

A completion is *truncated* when it reached max_new_tokens without EOS — known from generation,
never guessed from padding width. Source: DAPO arXiv 2503.14476 §3.4 (overlong filtering, eq. 13).

Length shaping within a group (`kimi_length`, below): rewards that compare a completion's length with
the other completions for the same prompt, using `LengthRows` (group ids, per-row reward metrics).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.core.registry import register
from zoo.core.types import LengthResult, LengthRows


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _cache_and_max(params: Mapping[str, Any], max_new_tokens: int | None) -> tuple[float | None, float | None]:
    """Check overlong_soft's parameters; return (L_cache, L_max), None where not yet known.

    Raises ValueError unless exactly one of cache_len / cache_frac is set, cache_frac is in (0, 1),
    max_len (or max_new_tokens) is > 0, and 0 < L_cache < L_max once L_max is known."""
    cache_len, cache_frac, max_len = params["cache_len"], params["cache_frac"], params["max_len"]
    if (cache_len is None) == (cache_frac is None):
        raise ValueError(
            f"set exactly one of cache_len and cache_frac, got cache_len={cache_len!r}, cache_frac={cache_frac!r}"
        )
    if cache_frac is not None and not (_is_number(cache_frac) and 0 < cache_frac < 1):
        raise ValueError(f"cache_frac must be in (0, 1), got {cache_frac!r}")
    if cache_len is not None and not (_is_number(cache_len) and cache_len > 0):
        raise ValueError(f"cache_len must be > 0, got {cache_len!r}")
    L_max = max_len if max_len is not None else max_new_tokens
    if L_max is not None and not (_is_number(L_max) and L_max > 0):
        raise ValueError(f"max_len must be > 0, got {L_max!r}")
    if L_max is None:
        return (None if cache_len is None else float(cache_len)), None
    L_cache = float(cache_len) if cache_len is not None else float(cache_frac) * float(L_max)
    if not L_cache < L_max:
        raise ValueError(f"cache_len ({L_cache:g}) must be < max_len ({L_max})")
    return L_cache, float(L_max)


def _check_soft(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _cache_and_max(params, context.get("max_new_tokens"))


@register("length", "overlong_soft", check=_check_soft)
def overlong_soft(
    lengths: Tensor,
    truncated: Tensor,
    max_new_tokens: int,
    rows: LengthRows | None = None,
    *,
    cache_len: int | None = None,
    cache_frac: float | None = None,
    max_len: int | None = None,
) -> LengthResult:
    """DAPO's soft overlong punishment, an extra objective column added to the correctness reward:
    0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max;
    -1 if |y| > L_max.

    L_max = max_len (None -> max_new_tokens); L_cache = cache_len, or cache_frac * L_max (not
    rounded). Exactly one of cache_len / cache_frac must be set.
    lengths: [N] the policy's own tokens per completion (`Batch.policy_tokens`, EOS included); truncated: [N] bool (unused: the penalty
    depends on the length alone); max_new_tokens: the generation budget; rows: unused.
    Returns LengthResult(column [N] float, keep None).
    Raises ValueError unless exactly one of cache_len / cache_frac is set and 0 < L_cache < L_max.
    Source: DAPO arXiv 2503.14476 §3.4, eq. 13 (L_cache 4096, L_max 20480 = cache_frac 0.2)."""
    params = {"cache_len": cache_len, "cache_frac": cache_frac, "max_len": max_len}
    L_cache, L_max = _cache_and_max(params, max_new_tokens)
    if L_cache is None or L_max is None:
        raise ValueError(f"overlong_soft needs max_len or max_new_tokens, got {max_new_tokens!r}")
    n = lengths.to(torch.float64)  # [N], exact for integer lengths
    expected = L_max - L_cache
    ramp = (expected - n) / L_cache  # [N], in [-1, 0) inside the cache window
    penalty = torch.where(n <= expected, torch.zeros_like(n), torch.where(n <= L_max, ramp, -torch.ones_like(n)))
    return LengthResult(column=penalty.to(torch.get_default_dtype()), keep=None)


@register("length", "overlong_filter")
def overlong_filter(
    lengths: Tensor, truncated: Tensor, max_new_tokens: int, rows: LengthRows | None = None
) -> LengthResult:
    """Overlong filtering: truncated completions leave the loss (keep = ~truncated).

    lengths: [N] the policy's tokens (unused); truncated: [N] bool (from generation); max_new_tokens, rows: unused.
    Returns LengthResult(column None, keep [N] bool). Raises ValueError when shapes differ.
    Source: DAPO arXiv 2503.14476 §3.4 (overlong filtering masks the loss of truncated samples)."""
    if lengths.shape != truncated.shape:
        raise ValueError(f"lengths {tuple(lengths.shape)} and truncated {tuple(truncated.shape)} must both be [N]")
    return LengthResult(column=None, keep=~truncated.bool())


# ---------------------------------------------------------------- within a group
def _check_metric(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not isinstance(params["metric"], str) or not params["metric"]:
        raise ValueError(
            f"metric must be the name of a per-row reward metric (e.g. accuracy), got {params['metric']!r}"
        )


@register("length", "kimi_length", check=_check_metric, needs_groups=True, reads_metric=True)
def kimi_length(
    lengths: Tensor, truncated: Tensor, max_new_tokens: int, rows: LengthRows, *, metric: str = "accuracy"
) -> LengthResult:
    """Kimi k1.5's length reward, an extra objective column: within each group,
    lam_i = 0.5 - (len_i - min_len) / (max_len - min_len); a correct completion gets lam_i, an
    incorrect one min(0, lam_i) (the shortest correct answer gets +0.5, the longest -0.5; a wrong
    answer is never rewarded for being short). A group whose lengths are all equal gets 0 (the 0/0
    case: our convention, nothing to prefer). Correct = rows.metrics[metric] == 1 (default
    `accuracy`: the reward registered with `accuracy=True`, e.g. `correctness`, gave 1.0); a row
    whose metric is NaN (unscored) gets 0 (its score is NaN through that reward already).
    Kimi also warms this reward up (off at first, then on); that schedule is not part of this
    component.

    lengths: [N] the policy's own tokens per completion (`Batch.policy_tokens`, EOS included);
    truncated: [N] bool (unused); max_new_tokens: unused; rows.group_ids [N]; rows.metrics[metric] [N]. Returns LengthResult(column [N] float,
    keep None). Raises ValueError naming the available metrics when `metric` is not among them.
    Source: Kimi k1.5 arXiv 2501.12599 §2.3.3 ("Length Penalty").
    """
    if metric not in rows.metrics:
        raise ValueError(
            f"length kimi_length: metric {metric!r} not among the step's metrics "
            f"(`accuracy` needs a correctness reward); available: {', '.join(sorted(rows.metrics)) or '(none)'}"
        )
    n = lengths.double()  # [N]
    c = rows.metrics[metric].to(n.device).double()  # [N]
    _, inv = torch.unique(rows.group_ids.to(n.device), return_inverse=True)  # [N] -> 0..P-1
    P = int(inv.max()) + 1 if inv.numel() else 0
    lo = torch.full((P,), float("inf"), dtype=n.dtype, device=n.device).scatter_reduce(0, inv, n, reduce="amin")
    hi = torch.full((P,), float("-inf"), dtype=n.dtype, device=n.device).scatter_reduce(0, inv, n, reduce="amax")
    span = (hi - lo)[inv]  # [N]
    lam = torch.where(span > 0, 0.5 - (n - lo[inv]) / span.clamp(min=1e-12), torch.zeros_like(n))  # [N]
    col = torch.where(c == 1.0, lam, torch.clamp(lam, max=0.0))
    col = torch.where(torch.isnan(c), torch.zeros_like(col), col)
    return LengthResult(column=col.to(torch.get_default_dtype()), keep=None)
