"""Covariance-selected clip rules (kind "clip"): Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy
Mechanism of Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617).

Both pick tokens by their centred covariance cov_t = (logp_t - mean logp) * (A_t - mean A) (means
over the real tokens the selection is made over, logp the current policy's, detached). They are
registered with `selects=True`: the update passes `step=` a `StepView` of the whole optimizer step
(docs/concepts/engine.md "Selections"), so the picked tokens, and the gradient, do not depend on the
micro-batch split or the number of ranks; `scope: micro` selects within each micro-batch, as verl
does. Called without `step` (plain tensors) a rule selects over its own inputs.

Clip-Cov's random pick is seeded: each token gets a pseudo-random priority from `seed` and digests
of its row's rollout-time content and of the step's rows (`token_priorities`), and the candidates of
lowest priority are picked. So a step gets the same tokens on every run, for every micro-batch split
and whatever the row order, and different steps different draws (verl draws torch.randperm per
micro-batch, unseeded).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.clip.surrogate import LOG_RATIO_CLAMP, clip_result, clipped_surrogate, prepare
from zoo.components.stats import as_bool, masked_mean, sanitize
from zoo.core.registry import register
from zoo.core.types import ClipResult, StepView

_CLIP_NOTE = "has only its token selection left (its PPO clip does nothing)"
_KL_NOTE = "is plain -A r (its |log r| penalty does nothing)"


# ---------------------------------------------------------------- selection over a view (plain functions)
def token_covariance(logp: Tensor, adv: Tensor, mask: Tensor) -> Tensor:
    """Centred per-token covariance (logp - mean logp) * (A - mean A), means over the real tokens.

    logp, adv, mask: [M, T] (detached). Returns [M, T], 0 on padding.
    Source: arXiv 2505.22617 (Cov(y_i) over the batch's N tokens, the Clip-Cov / KL-Cov definition)."""
    m = as_bool(mask)
    lp, a = sanitize(logp.detach(), m), sanitize(adv.detach(), m)
    cov = (lp - masked_mean(lp, m)) * (a - masked_mean(a, m))
    return sanitize(cov, m)


def selection_count(fraction: float, n_tokens: int) -> int:
    """How many tokens a selection of `fraction` of `n_tokens` picks: max(1, floor(fraction * n)),
    0 when fraction is 0 (our convention: then the rule is its base rule) or there are no tokens.
    Source: verl `clip_num = max(int(clip_cov_ratio * n), 1)` (which asserts fraction > 0)."""
    if fraction == 0 or n_tokens == 0:
        return 0
    return min(n_tokens, max(1, int(fraction * n_tokens)))


KEY_FIELDS = ("mask", "advantages", "completion_ids")


def token_priorities(fields: Mapping[str, Tensor], seed: int) -> Tensor:
    """A seeded pseudo-random priority in [0, 1) per token of a view, [M, T].

    Row i's priorities come from a generator seeded with `seed`, a digest of the row's own
    rollout-time content (mask, advantages and completion ids; logp_old when the view has no ids,
    e.g. a call on plain tensors) and an order-free digest of all the view's rows (the sum of the
    row digests). So the priorities are the same on every run, for every micro-batch split, and
    follow their row when rows are permuted; two optimizer steps with different rows differ."""
    keys = [k for k in KEY_FIELDS if k in fields] + ([] if "completion_ids" in fields else ["logp_old"])
    M, T = fields["mask"].shape
    rows = [_digest(str(int(seed)).encode(), *(fields[k][i] for k in keys)) for i in range(M)]
    step = (sum(rows) % (1 << 64)).to_bytes(8, "little")
    out = torch.empty(M, T, dtype=torch.float64)
    for i, h in enumerate(rows):
        g = torch.Generator().manual_seed(_digest(step, h.to_bytes(8, "little")) >> 1)
        out[i] = torch.rand(T, generator=g, dtype=torch.float64)
    return out


def _digest(*parts: bytes | Tensor) -> int:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
    return int.from_bytes(h.digest(), "little")


def clip_cov_selection(
    fields: Mapping[str, Tensor],
    *,
    eps_low: float,
    eps_high: float,
    ratio: float,
    cov_lb: float,
    cov_ub: float,
    seed: int,
) -> Tensor:
    """Clip-Cov's tokens over a view: among real tokens the PPO clip did not clip whose covariance
    lies strictly inside (cov_lb, cov_ub), selection_count(ratio, n_real) picked uniformly at random.

    fields: `mask`, `advantages`, `logp_old`, `logp`, each [M, T]. Returns [M, T] bool.
    Source: arXiv 2505.22617 (Clip-Cov); verl `compute_policy_loss_clip_cov`."""
    m = as_bool(fields["mask"])
    lp, old, a = (sanitize(fields[k].detach(), m) for k in ("logp", "logp_old", "advantages"))
    r = (lp - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
    _, low, high = clipped_surrogate(r, a, eps_low, eps_high)
    cov = token_covariance(lp, a, m)
    cand = (m & ~low & ~high & (cov > cov_lb) & (cov < cov_ub)).flatten().cpu()
    k = selection_count(ratio, int(m.sum()))
    prio = token_priorities(fields, seed).flatten()
    prio = torch.where(cand, prio, torch.full_like(prio, 2.0))  # non-candidates last
    pick = torch.sort(prio, stable=True).indices[: min(k, int(cand.sum()))]  # the k candidates of lowest priority
    out = torch.zeros(m.numel(), dtype=torch.bool)
    out[pick] = True
    return out.view(m.shape).to(m.device)


def kl_cov_selection(fields: Mapping[str, Tensor], *, ratio: float, seed: int = 0) -> Tensor:
    """KL-Cov's tokens over a view: the selection_count(ratio, n_real) real tokens of largest
    covariance (exact ties broken by token_priorities, so not by row order).
    fields: `mask`, `advantages`, `logp`, each [M, T]. Returns [M, T] bool.
    Source: arXiv 2505.22617 (KL-Cov); verl `compute_policy_loss_kl_cov` (torch.topk)."""
    m = as_bool(fields["mask"])
    cov = token_covariance(fields["logp"], fields["advantages"], m).flatten().cpu()
    cov = torch.where(m.flatten().cpu(), cov, torch.full_like(cov, -float("inf")))
    k = selection_count(ratio, int(m.sum()))
    by_prio = torch.sort(token_priorities(fields, seed).flatten(), stable=True).indices
    order = by_prio[torch.sort(cov[by_prio], descending=True, stable=True).indices[:k]]
    out = torch.zeros(m.numel(), dtype=torch.bool)
    out[order] = True
    return out.view(m.shape).to(m.device)


def _own_view(logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor) -> StepView:
    """The view of a call on plain tensors: its own rows, detached."""
    m = as_bool(mask)
    f = {
        "mask": m,
        "advantages": sanitize(adv.detach(), m),
        "logp_old": sanitize(logp_old.detach(), m),
        "logp": sanitize(logp.detach(), m),
    }
    return StepView(f, torch.arange(m.shape[0]))


# ---------------------------------------------------------------- checks
def _number(name: str, v: Any) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or abs(v) == float("inf"):
        raise ValueError(f"{name} must be a finite number, got {v!r}")
    return float(v)


def _fraction(v: Any) -> None:
    if not 0 <= _number("ratio", v) <= 1:
        raise ValueError(f"ratio (the fraction of tokens selected) must be in [0, 1], got {v!r} (0: no selection)")


def _check_clip_cov(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    for k in ("eps_low", "eps_high"):
        if not _number(k, params[k]) > 0:
            raise ValueError(f"{k} must be > 0, got {params[k]!r}")
    _fraction(params["ratio"])
    if not _number("cov_lb", params["cov_lb"]) < _number("cov_ub", params["cov_ub"]):
        raise ValueError(f"cov_lb ({params['cov_lb']}) must be < cov_ub ({params['cov_ub']})")
    if not isinstance(params["seed"], int) or isinstance(params["seed"], bool):
        raise ValueError(f"seed must be an integer, got {params['seed']!r}")
    if params["scope"] not in ("step", "micro"):
        raise ValueError(f"scope must be step or micro, got {params['scope']!r}")


def _check_kl_cov(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _fraction(params["ratio"])
    if not _number("beta", params["beta"]) >= 0:
        raise ValueError(f"beta must be >= 0, got {params['beta']!r}")
    if params["scope"] not in ("step", "micro"):
        raise ValueError(f"scope must be step or micro, got {params['scope']!r}")


# ---------------------------------------------------------------- registered rules
@register(
    "clip",
    "clip_cov",
    check=_check_clip_cov,
    selects=True,
    reads=("logp",),
    single_update=_CLIP_NOTE,
    stats=("clip/selected_frac",),
)
def clip_cov(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ratio: float = 2e-4,
    cov_lb: float = 1.0,
    cov_ub: float = 5.0,
    seed: int = 0,
    scope: str = "step",
    step: StepView | None = None,
) -> ClipResult:
    """Clip-Cov: the PPO clipped loss, with the loss and gradient of a few high-covariance tokens zeroed.

    loss_t = 0 for the clip_cov_selection tokens (max(1, floor(ratio * n)) of the tokens not already
    clipped whose covariance lies in (cov_lb, cov_ub), drawn at random with a seeded generator), else
    -min(r A, clip(r, 1-eps_low, 1+eps_high) A). `ratio: 0` selects nothing: plain ppo / clip_higher
    (our convention; verl asserts ratio > 0). Flags are the PPO clip's (the selected tokens are not
    flagged; their share is the token stat `clip/selected_frac`). `step`: the StepView the update
    passes (not a hyperparameter); None selects over the call's own rows. `scope: micro` makes the
    update pass the micro-batch's view (verl's behaviour).
    logp, logp_old, adv, mask: [n, T]. Returns ClipResult with [n, T] fields.
    Raises ValueError when shapes differ or a hyperparameter is out of range.
    Source: arXiv 2505.22617, Clip-Cov and its settings (r = 2e-4, omega_low 1, omega_high 5); eps 0.2:
    verl clip_ratio default (the paper's PPO baseline)."""
    _check_clip_cov(
        {
            "eps_low": eps_low,
            "eps_high": eps_high,
            "ratio": ratio,
            "cov_lb": cov_lb,
            "cov_ub": cov_ub,
            "seed": seed,
            "scope": scope,
        },
        {},
    )
    m, _, log_ratio, a = prepare(logp, logp_old, adv, mask)
    ratio_t = log_ratio.exp()  # [n, T]
    loss, low, high = clipped_surrogate(ratio_t, a, eps_low, eps_high)  # [n, T] each
    view = step if step is not None else _own_view(logp, logp_old, adv, mask)
    sel = view.local(
        clip_cov_selection(
            view.fields, eps_low=eps_low, eps_high=eps_high, ratio=ratio, cov_lb=cov_lb, cov_ub=cov_ub, seed=seed
        ),
        like=m,
    )  # [n, T]
    loss = torch.where(sel, torch.zeros_like(loss), loss)
    return _with_selection(clip_result(loss, low, high, ratio_t, m), sel & m)


@register(
    "clip",
    "kl_cov",
    check=_check_kl_cov,
    selects=True,
    reads=("logp",),
    single_update=_KL_NOTE,
    stats=("clip/selected_frac",),
)
def kl_cov(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    ratio: float = 2e-4,
    beta: float = 1.0,
    scope: str = "step",
    step: StepView | None = None,
) -> ClipResult:
    """KL-Cov: no ratio clipping; the unclipped surrogate -A r on every token plus beta |log r| on
    the kl_cov_selection tokens (the max(1, floor(ratio * n)) real tokens of largest covariance).

    `ratio: 0` selects nothing: the `none` rule. Under a single on-policy update log r = 0 and the
    penalty does nothing (`zoo validate` warns). Flags are all False; the selected tokens' share is the
    token stat `clip/selected_frac`. `step`: the StepView the update
    passes (not a hyperparameter); None selects over the call's own rows.
    logp, logp_old, adv, mask: [n, T]. Returns ClipResult with [n, T] fields.
    Raises ValueError when shapes differ or a hyperparameter is out of range.
    Source: arXiv 2505.22617, KL-Cov and its settings (k = 2e-4 for the 32B model, 2e-3 for 7B; beta 1);
    verl kl_cov_ratio 2e-4 (ppo_kl_coef: 1.0 in code, 0.1 in its actor yaml)."""
    _check_kl_cov({"ratio": ratio, "beta": beta, "scope": scope}, {})
    m, _, log_ratio, a = prepare(logp, logp_old, adv, mask)
    ratio_t = log_ratio.exp()  # [n, T]
    view = step if step is not None else _own_view(logp, logp_old, adv, mask)
    sel = view.local(kl_cov_selection(view.fields, ratio=ratio), like=m)  # [n, T]
    loss = -ratio_t * a + torch.where(sel, beta * log_ratio.abs(), torch.zeros_like(log_ratio))
    never = torch.zeros_like(m)
    return _with_selection(clip_result(loss, never, never, ratio_t, m), sel & m)


def _with_selection(res: ClipResult, sel: Tensor) -> ClipResult:
    """res with token stat `clip/selected_frac` (the selected tokens, [n, T] float; logged as a token mean)."""
    return dataclasses.replace(res, token_stats={"clip/selected_frac": sel.float()})
