"""Divergence-masked clip rule (kind "clip"): DPPO, Divergence Proximal Policy Optimization (Qi et al.
2026, "Rethinking the Trust Region in LLM Reinforcement Learning", arXiv 2602.04879).

PPO's ratio clip judges a token by r = pi / pi_old, a one-sample estimate of the policy's divergence
that over-penalises rare tokens and under-constrains likely ones. DPPO instead drops a token's
gradient when a direct estimate of the divergence between the current policy pi and the anchor mu,
restricted to the sampled token ("binary": the two-outcome distribution {y_t, not y_t}), leaves the
trust region in the direction the advantage pushes:

    p = pi(y_t), q = mu(y_t)
    tv:  D = p - q                                        (binary total variation, signed)
    kl:  D = q log(q / p) + (1 - q) log((1 - q) / (1 - p))   (binary KL(mu || pi), >= 0)
    keep_t = D <= delta_high  where A_t > 0  (tv; kl: or p <= q: moving away from the push is kept)
             D >= -delta_low  where A_t <= 0 (tv; kl: D <= delta_low or p >= q)
    loss_t = -A_t * sg(min(pi / mu, C)) * log pi(y_t) * keep_t

The anchor mu is the sampler's distribution (`anchor: rollout`, logp_rollout): the paper recommends
clipping against the original rollout policy rather than a recomputed pi_old (§5.2; verl's recipe
sets `rollout_correction.bypass_mode=True`, which makes its old_log_prob the rollout log-probs;
SkyRL's and TRL's DPPO read rollout_logprobs). `anchor: old` uses the trainer's logp_old instead
(verl without bypass mode, TRL's `dppo_binary_kl_recompute`); with logp_rollout == logp_old the two
are equal. The importance weight pi / mu is detached and truncated at C (truncated IS instead of
dual-clip; the paper, §5.4, recommends a large C): the gradient is -A min(pi / mu, C) grad log pi on
kept tokens and 0 on dropped ones.

Conventions where peers differ: the loss *value* is verl's -A sg(w) log pi (as zoo's `cispo`), only
its gradient is a surrogate's (SkyRL writes -A r with the ratio not detached: the same gradient below
C, a different value; SkyRL does not truncate). A_t == 0 takes the A <= 0 branch, as verl's
`torch.where(advantages > 0, ...)` (the token's loss is 0 either way). Log-ratios are clamped to
[-20, 20] before exp, and binary KL adds 1e-8 inside its second log, as verl and TRL do.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.clip.surrogate import LOG_RATIO_CLAMP, clip_result, prepare
from zoo.components.stats import check_same_shape, sanitize
from zoo.core.registry import register
from zoo.core.types import ClipResult

DIVERGENCES = ("tv", "kl")
ANCHORS = ("rollout", "old")
KL_EPS = 1e-8  # verl / TRL: inside log((1 - q + eps) / (1 - p + eps))


def _check_dppo(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["divergence"] not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {', '.join(DIVERGENCES)}, got {params['divergence']!r}")
    if params["anchor"] not in ANCHORS:
        raise ValueError(f"anchor must be one of {', '.join(ANCHORS)}, got {params['anchor']!r}")
    for k in ("delta_low", "delta_high"):
        v = params[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < float("inf"):
            raise ValueError(f"{k} must be a finite number > 0, got {v!r}")
    c = params["C"]
    if c is not None and (not isinstance(c, (int, float)) or isinstance(c, bool) or not 1 <= c < float("inf")):
        raise ValueError(f"C must be a finite number >= 1 or null (no truncation), got {c!r}")


def binary_divergence(logp: Tensor, logp_anchor: Tensor, divergence: str) -> Tensor:
    """The binary divergence of the sampled token between pi (logp) and the anchor mu (logp_anchor):
    `tv` p - q (signed), `kl` q log(q/p) + (1-q) log((1-q+1e-8)/(1-p+1e-8)), p = e^logp, q = e^logp_anchor.

    logp, logp_anchor: [N, T] (detached, finite). Returns [N, T]. Raises ValueError for another
    divergence. Source: arXiv 2602.04879 (Binary-TV / Binary-KL approximations); verl
    `compute_policy_loss_dppo_tv` / `_dppo_kl`."""
    p, q = logp.exp(), logp_anchor.exp()
    if divergence == "tv":
        return p - q
    if divergence == "kl":
        return q * (logp_anchor - logp) + (1.0 - q) * torch.log((1.0 - q + KL_EPS) / (1.0 - p + KL_EPS))
    raise ValueError(f"divergence {divergence!r}: expected one of {', '.join(DIVERGENCES)}")


def trust_region_keep(
    d: Tensor, p_minus_q: Tensor, adv: Tensor, divergence: str, delta_low: float, delta_high: float
) -> Tensor:
    """Tokens inside DPPO's trust region, [N, T] bool. d: binary divergence, p_minus_q: pi(y) - mu(y),
    adv: advantages, all [N, T]. tv: A > 0 keeps d <= delta_high, else d >= -delta_low; kl: A > 0
    keeps d <= delta_high or p <= q, else d <= delta_low or p >= q. Source: verl's valid masks."""
    if divergence == "tv":
        pos, neg = d <= delta_high, d >= -delta_low
    else:
        pos, neg = (d <= delta_high) | (p_minus_q <= 0), (d <= delta_low) | (p_minus_q >= 0)
    return torch.where(adv > 0, pos, neg)


@register(
    "clip",
    "dppo",
    check=_check_dppo,
    reads=("logp_rollout",),
    single_update="acts only on the sampler's mismatch (anchor: rollout)",
)
def dppo(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    logp_rollout: Tensor | None = None,
    divergence: str = "tv",
    delta_low: float = 0.15,
    delta_high: float = 0.15,
    C: float | None = 20.0,
    anchor: str = "rollout",
) -> ClipResult:
    """DPPO: loss = -A * sg(min(pi / mu, C)) * logp on tokens inside the binary trust region, 0 outside
    (module docstring). mu is the sampler (`anchor: rollout`, logp_rollout) or the trainer at rollout
    time (`anchor: old`, logp_old); `C: null` does not truncate.

    logp, logp_old, adv, mask, logp_rollout: [N, T] (logp_rollout is data the update passes, not a
    hyperparameter). Returns ClipResult with [N, T] fields: clip_high marks dropped tokens with A > 0,
    clip_low dropped tokens with A < 0; `ratio` is pi / pi_old (logging, as every clip rule).
    Raises ValueError when shapes differ, a hyperparameter is out of range, or anchor is rollout and
    logp_rollout is None (the generator does not report the sampler's log-probs).
    Source: arXiv 2602.04879 (binary TV / KL trust region, §5.2 rollout anchor, §5.4 truncated IS);
    delta 0.15 (tv) / 0.05 (kl): verl examples/dppo_trainer/run_qwen30b_dppo.sh; C = 20: verl's
    `config.get("clip_ratio_c", 20.0)` in compute_policy_loss_dppo_tv / _kl."""
    _check_dppo(
        {"divergence": divergence, "anchor": anchor, "delta_low": delta_low, "delta_high": delta_high, "C": C}, {}
    )
    m, logp_s, log_ratio, a = prepare(logp, logp_old, adv, mask)
    if anchor == "rollout":
        if logp_rollout is None:
            raise ValueError(
                "clip 'dppo' (anchor: rollout) needs the sampler's log-probs (logp_rollout), and this "
                "generator does not report them: use a generator that does (sampling.backend) or anchor: old"
            )
        check_same_shape(logp=logp, logp_rollout=logp_rollout)
        mu = sanitize(logp_rollout.detach().to(logp_s.device, logp_s.dtype), m)  # [N, T]
    else:
        mu = sanitize(logp_old.detach(), m)
    lp = logp_s.detach()
    lr_mu = (lp - mu).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [N, T], log pi / mu
    w = lr_mu.exp() if C is None else lr_mu.exp().clamp(max=C)  # [N, T], detached truncated IS weight
    d = binary_divergence(lp, mu, divergence)  # [N, T]
    keep = trust_region_keep(d, lp.exp() - mu.exp(), a, divergence, delta_low, delta_high) & m
    loss = -a * w * logp_s * keep  # [N, T]
    dropped = ~keep & m
    return clip_result(loss, dropped & (a < 0), dropped & (a > 0), log_ratio.exp(), m)
