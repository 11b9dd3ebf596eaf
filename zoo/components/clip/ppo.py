"""Clip rules (kind "clip"): per-token policy loss = minus the (clipped) surrogate.

Every rule is `fn(logp, logp_old, adv, mask) -> ClipResult`, all inputs `[N, T]`:
logp carries the gradient; logp_old (frozen at rollout time, case C4) and adv are detached here.
Padded slots of logp, logp_old and adv are *selected away* before any arithmetic, so NaN/inf there
reach neither the loss nor its gradient (case C7); the loss is 0 on padding, the ratio 1.

The log-ratio logp - logp_old is clamped to [-20, 20] before exp, as verl does, so one extreme
token cannot overflow (this only matters far outside any clip range). The shared pieces live in
zoo/components/clip/surrogate.py; SAPO and GMPO in soft.py, Clip-Cov and KL-Cov in cov.py (this package).

Sources: PPO clip, arXiv 1707.06347 eq. 7 (and Ziegler et al. arXiv 1909.08593); clip-higher,
DAPO arXiv 2503.14476 §3.1; dual-clip, Ye et al. arXiv 1912.09729 ("dual-clip PPO"); GSPO
arXiv 2507.18071 eq. 5-7; CISPO, MiniMax-M1 arXiv 2506.13585 §3.1.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.clip.surrogate import clip_result as _result
from zoo.components.clip.surrogate import clipped_surrogate as _clipped_surrogate
from zoo.components.clip.surrogate import prepare as _prepare
from zoo.components.stats import as_bool, masked_mean
from zoo.core.registry import register
from zoo.core.types import ClipResult


# ---------------------------------------------------------------- shared pieces (zoo/components/clip/surrogate.py)
def _ppo_family(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    eps_low: float,
    eps_high: float,
    dual_c: float | None = None,
) -> ClipResult:
    """Token-level clipped loss shared by ppo, clip_higher and dual_clip (dual_c = None: no dual clip)."""
    m, _, log_ratio, a = _prepare(logp, logp_old, adv, mask)
    ratio = log_ratio.exp()  # [N, T]
    loss, low, high = _clipped_surrogate(ratio, a, eps_low, eps_high)  # [N, T] each
    if dual_c is not None:
        # dual clip: for A < 0 the loss is bounded by -c*A (gradient 0 beyond it); A >= 0 untouched
        loss = torch.where(a < 0, torch.minimum(loss, -dual_c * a), loss)
    return _result(loss, low, high, ratio, m)


def clip_fractions(result: ClipResult, mask: Tensor) -> dict[str, float]:
    """Share of real tokens whose ratio was clipped, for logging (padding ignored, case C9).

    result: a ClipResult with [N, T] flags; mask: [N, T]. Returns {"clip/low_frac", "clip/high_frac"}
    as floats (0.0 when there is no real token). Raises nothing; shapes must broadcast.
    Source: docs/concepts/cases.md C9 (every logged mean ignores padding); DAPO arXiv 2503.14476 §3.1 (clip ratios)."""
    m = as_bool(mask)
    return {
        "clip/low_frac": float(masked_mean(result.clip_low.float(), m)),
        "clip/high_frac": float(masked_mean(result.clip_high.float(), m)),
    }


# ---------------------------------------------------------------- checks (ValueError; also run at call time)
def _positive(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r} (clip 'none' turns clipping off)")


def _below_one(name: str, v: float) -> None:
    if v >= 1:
        raise ValueError(
            f"{name} must be < 1: the lower clip bound 1 - {name} = {1 - v:g} is <= 0, which no ratio "
            f"reaches, so the clip would act on one side only (a wide upper bound alone: clip_higher "
            f"with eps_high), got {name}={v}"
        )


def _check_ppo(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _positive("eps", params["eps"])
    _below_one("eps", params["eps"])


def _check_low_high(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    lo, hi = params["eps_low"], params["eps_high"]
    _positive("eps_low", lo)
    _below_one("eps_low", lo)
    _positive("eps_high", hi)
    if hi < lo:
        raise ValueError(f"eps_high ({hi}) must be >= eps_low ({lo})")


def _dual_eps(eps: float | None, eps_low: float | None, eps_high: float | None) -> tuple[float, float]:
    """(eps_low, eps_high) of dual_clip: `eps` sets both; else eps_low (default 0.2) and eps_high
    (default eps_low). Raises ValueError when `eps` is combined with eps_low/eps_high."""
    if eps is not None:
        if eps_low is not None or eps_high is not None:
            raise ValueError("give either eps or eps_low/eps_high, not both")
        return eps, eps
    lo = 0.2 if eps_low is None else eps_low
    return lo, lo if eps_high is None else eps_high


def _check_dual(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    lo, hi = _dual_eps(params["eps"], params["eps_low"], params["eps_high"])
    _check_low_high({"eps_low": lo, "eps_high": hi}, context)
    c = params["c"]
    if not isinstance(c, (int, float)) or isinstance(c, bool) or not c > 1:
        raise ValueError(f"c must be > 1, got {c!r}")


def _check_cispo(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["eps_low"] is not None:
        _positive("eps_low", params["eps_low"])
    _positive("eps_high", params["eps_high"])


# ---------------------------------------------------------------- registered rules
@register("clip", "ppo", check=_check_ppo)
def ppo(logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, eps: float = 0.2) -> ClipResult:
    """PPO clip: loss = -min(r A, clip(r, 1-eps, 1+eps) A), r = exp(logp - logp_old).

    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields.
    Raises ValueError when shapes differ or eps is not in (0, 1).
    Source: Schulman et al. arXiv 1707.06347 eq. 7; Ziegler et al. arXiv 1909.08593 (eps 0.2)."""
    _check_ppo({"eps": eps}, {})
    return _ppo_family(logp, logp_old, adv, mask, eps, eps)


@register("clip", "clip_higher", check=_check_low_high)
def clip_higher(
    logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float = 0.2, eps_high: float = 0.28
) -> ClipResult:
    """Decoupled clip: loss = -min(r A, clip(r, 1-eps_low, 1+eps_high) A); eps_low == eps_high is ppo.

    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields.
    Raises ValueError when shapes differ or unless eps_high >= eps_low, 0 < eps_low < 1.
    Source: DAPO arXiv 2503.14476 §3.1 (eps_low 0.2, eps_high 0.28)."""
    _check_low_high({"eps_low": eps_low, "eps_high": eps_high}, {})
    return _ppo_family(logp, logp_old, adv, mask, eps_low, eps_high)


@register("clip", "dual_clip", check=_check_dual)
def dual_clip(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps: float | None = None,
    eps_low: float | None = None,
    eps_high: float | None = None,
    c: float = 3.0,
) -> ClipResult:
    """Dual-clip PPO: where A < 0, loss = min(ppo_loss, -c A); where A >= 0, the ppo loss.

    The lower bound stops a huge ratio on a negative-advantage token from producing an unbounded loss;
    positive advantages keep their gradient (case C5). `eps` sets a symmetric clip; otherwise eps_low
    (default 0.2) and eps_high (default eps_low).
    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields; the flags mark the
    eps clips only (the dual-clip region A < 0, r > c is not flagged).
    Raises ValueError when shapes differ, unless eps_high >= eps_low > 0, when eps is combined with
    eps_low/eps_high, or "c must be > 1".
    Source: Ye et al. arXiv 1912.09729 (dual-clip PPO); verl's `clip_ratio_c` (default 3)."""
    _check_dual({"eps": eps, "eps_low": eps_low, "eps_high": eps_high, "c": c}, {})
    lo, hi = _dual_eps(eps, eps_low, eps_high)
    return _ppo_family(logp, logp_old, adv, mask, lo, hi, dual_c=c)


def _check_two_sided(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    lo, hi = params["eps_low"], params["eps_high"]
    _check_low_high({"eps_low": lo, "eps_high": hi}, context)
    d = params["delta"]
    if not isinstance(d, (int, float)) or isinstance(d, bool) or not d > 1.0 + hi:
        raise ValueError(
            f"delta must be > 1 + eps_high = {1.0 + hi:g}, got {d!r}: only then is TRL's two-sided "
            "clip the dual clip with c = delta (with a smaller delta it also caps positive "
            "advantages; use clip_higher with a smaller eps_high for that)"
        )


@register("clip", "two_sided_clip", check=_check_two_sided)
def two_sided_clip(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    delta: float = 4.0,
) -> ClipResult:
    """TRL's two-sided clip (`delta`): loss = -min(min(r, delta) A, clip(r, 1-eps_low, 1+eps_high) A).

    The same math as `dual_clip` with c = delta whenever delta > 1 + eps_high: for A >= 0 the clipped
    branch is <= 1 + eps_high < delta, so min(r, delta) changes nothing (ppo); for A < 0 the loss is
    -A max(min(r, delta), clip(r)) = -A min(max(r, clip(r)), delta) = dual clip's min(ppo loss, -delta A).
    Registered as that alias (it calls dual clip's code), not as new math.
    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields (flags as dual_clip's).
    Raises ValueError when shapes differ, unless eps_high >= eps_low > 0, or unless delta > 1 + eps_high.
    Source: INTELLECT-2 arXiv 2505.07291 §3 (two-sided GRPO clipping, delta 4); TRL GRPOConfig `delta`
    (epsilon 0.2; epsilon_high defaults to epsilon)."""
    _check_two_sided({"eps_low": eps_low, "eps_high": eps_high, "delta": delta}, {})
    return _ppo_family(logp, logp_old, adv, mask, eps_low, eps_high, dual_c=delta)


def _check_gspo(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _check_low_high(params, context)
    if params["advantage"] not in ("row_mean", "token"):
        raise ValueError(
            f"advantage must be 'row_mean' or 'token' (verl's and TRL's rule), got {params['advantage']!r}"
        )


@register("clip", "gspo", check=_check_gspo, level="sequence")
def gspo(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    advantage: str = "row_mean",
) -> ClipResult:
    """GSPO: one length-normalised ratio per sequence, clipped, broadcast over the row's real tokens.

    s_i = exp(mean over real tokens of (logp - logp_old)) = (pi(o_i|q)/pi_old(o_i|q))^(1/|o_i|);
    A_i = the row's sequence advantage (masked mean of adv); every real token of row i gets
    -min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i), so `seq_mean_token_mean` gives the GSPO
    objective (1/G) sum_i min(...). Flags are per row, broadcast; `ratio` holds s_i broadcast.
    `advantage: token` is verl's and TRL's rule: each token keeps its own A_t,
    -min(s_i A_t, clip(s_i) A_t), flags per token; the same for a sequence-level estimator, not for a
    token-level one (`gae`, `reinforce`: `zoo validate` warns on the default there).
    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields.
    Raises ValueError when shapes differ or unless eps_high >= eps_low, 0 < eps_low < 1.
    Source: Zheng et al. arXiv 2507.18071 eq. 5-7 (eps 3e-4 / 4e-4, §5.1)."""
    _check_gspo({"eps_low": eps_low, "eps_high": eps_high, "advantage": advantage}, {})
    m, _, log_ratio, a = _prepare(logp, logp_old, adv, mask)
    s = masked_mean(log_ratio, m, dim=-1).exp().unsqueeze(-1)  # [N, 1]
    a_used = a if advantage == "token" else masked_mean(a, m, dim=-1).unsqueeze(-1)  # [N, T] or [N, 1]
    loss, low, high = _clipped_surrogate(s.expand_as(a_used), a_used, eps_low, eps_high)
    return _result(loss.expand_as(a), low.expand_as(m), high.expand_as(m), s.expand_as(a), m)


@register("clip", "cispo", check=_check_cispo)
def cispo(
    logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float | None = None, eps_high: float = 0.28
) -> ClipResult:
    """CISPO: loss = -sg(clip(r, 1-eps_low, 1+eps_high)) * A * logp (REINFORCE with a clipped,
    stop-gradient IS weight); no token's gradient is dropped: d loss / d logp = -w A.

    eps_low None = no lower bound (the paper sets eps_low^IS large and tunes only eps_high^IS).
    The paper does not state eps_high's value; 0.28 is our default (DAPO's). The loss value is not a
    surrogate value (it contains logp); only its gradient is meaningful.
    Flags mark tokens whose IS weight was capped (r < 1-eps_low, r > 1+eps_high), whatever A's sign,
    since CISPO never removes a gradient.
    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields.
    Raises ValueError when shapes differ, eps_low is not None and <= 0, or eps_high <= 0.
    Source: MiniMax-M1 arXiv 2506.13585 §3.1 (the CISPO objective and r-hat definition)."""
    _check_cispo({"eps_low": eps_low, "eps_high": eps_high}, {})
    m, logp_s, log_ratio, a = _prepare(logp, logp_old, adv, mask)
    ratio = log_ratio.exp()  # [N, T]
    lo = None if eps_low is None else 1.0 - eps_low
    weight = ratio.detach().clamp(min=lo, max=1.0 + eps_high)  # [N, T], stop-gradient
    loss = -weight * a * logp_s  # [N, T]
    r = ratio.detach()
    low = torch.zeros_like(m) if lo is None else r < lo
    return _result(loss, low, r > 1.0 + eps_high, ratio, m)


@register("clip", "none")
def no_clip(logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor) -> ClipResult:
    """Unclipped importance-weighted policy gradient: loss = -r A (its gradient at r = 1 is
    REINFORCE's, -A d logp). Flags are all False.

    logp, logp_old, adv, mask: [N, T]. Returns ClipResult with [N, T] fields.
    Raises ValueError when shapes differ.
    Source: Williams 1992 (REINFORCE); RLOO arXiv 2402.14740 (no clipping)."""
    m, _, log_ratio, a = _prepare(logp, logp_old, adv, mask)
    ratio = log_ratio.exp()  # [N, T]
    never = torch.zeros_like(m)  # [N, T] bool
    return _result(-ratio * a, never, never, ratio, m)
