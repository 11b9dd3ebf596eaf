"""Policy losses that verl and TRL ship (kind "clip"): GPG's plain -A log pi, DRO's quadratic
penalty, VESPO's gamma-weighted sequence ratio and LUSPO's length-scaled GSPO.

Every rule is `fn(logp, logp_old, adv, mask) -> ClipResult` (all [N, T]); padding is selected away
before any arithmetic (zoo/components/clip/surrogate.py `prepare`), so NaN/inf there reach neither the
loss nor its gradient; the loss is 0 and the ratio 1 on padding.

Sources (what was checked where): GPG, arXiv 2504.02546 eq. 9 and verl `compute_policy_loss_gpg`
(read); DRO, verl `compute_policy_loss_dro` as its own test states it (-(logp A - beta/2 (logp -
logp_old)^2), `dro_beta` > 0 required), the function body itself not read; VESPO, TRL 1.x
`GRPOTrainer.get_gamma_weights` and `_compute_loss` (loss_type "vespo"), read; LUSPO, TRL
`_compute_loss` (loss_type "luspo", importance_sampling_level "sequence"), read; paper texts of DRO,
VESPO and LUSPO not read here.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.clip.ppo import _check_low_high, gspo
from zoo.components.clip.surrogate import LOG_RATIO_CLAMP, clip_result, prepare
from zoo.components.stats import sanitize
from zoo.core.registry import register
from zoo.core.types import ClipResult

VESPO_LOG_W_MIN = math.log(1e-8)  # TRL's lower clamp of the sequence log-weight


@register("clip", "gpg", single_update="has no ratio to clip (its gradient is the same at every update)")
def gpg(logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor) -> ClipResult:
    """GPG's policy loss: -A log pi per token (no ratio, no clip; the gradient is REINFORCE's -A d logp
    at any ratio, the `none` rule's only at r = 1). Flags all False; `ratio` is pi/pi_old (logging).
    logp, logp_old, adv, mask: [N, T]. Source: arXiv 2504.02546 eq. 9; verl `compute_policy_loss_gpg`."""
    m, logp_s, log_ratio, a = prepare(logp, logp_old, adv, mask)
    never = torch.zeros_like(m)
    return clip_result(-a * logp_s, never, never, log_ratio.exp(), m)


def _check_beta(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    b = params["beta"]
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b < float("inf"):
        raise ValueError(f"beta must be a finite number > 0 (verl requires dro_beta > 0), got {b!r}")


@register("clip", "dro", check=_check_beta, single_update="is plain -A log pi (its penalty is 0 at ratio 1)")
def dro(logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, beta: float = 0.05) -> ClipResult:
    """DRO: loss = -(A log pi - beta/2 (log pi - log pi_old)^2) per token: REINFORCE with a quadratic
    pull towards pi_old instead of a clip (gradient -A + beta (log pi - log pi_old)). Flags all False.
    logp, logp_old, adv, mask: [N, T]. beta: verl's `dro_beta` (no default there: 0.05 is the value in
    verl's test, our default). Source: verl `compute_policy_loss_dro` (and tinker-cookbook `dro_loss`)."""
    _check_beta({"beta": beta}, {})
    m, logp_s, log_ratio, a = prepare(logp, logp_old, adv, mask)
    raw = logp_s - sanitize(logp_old.detach(), m)  # [N, T], log pi - log pi_old (not clamped, as verl)
    never = torch.zeros_like(m)
    return clip_result(-(a * logp_s - 0.5 * beta * raw**2), never, never, log_ratio.exp(), m)


def _check_vespo(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg"):
        v = params[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            raise ValueError(f"{k} must be a finite number >= 0, got {v!r}")


def vespo_weight(seq_log_w: Tensor, adv: Tensor, k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float):
    """phi(w) = exp(lam + k log w - lam w) (phi(1) = 1), k and lam by the sign of A (A >= 0: pos).
    seq_log_w, adv: same shape; log w is clamped to [log 1e-8, 20] first (TRL); lam to >= 1e-4.
    Returns phi, detached, with NaN/inf set to 0. Source: TRL `GRPOTrainer.get_gamma_weights`."""
    lw = seq_log_w.detach().clamp(VESPO_LOG_W_MIN, LOG_RATIO_CLAMP)
    nonneg = adv >= 0
    k = torch.where(nonneg, torch.full_like(lw, k_pos), torch.full_like(lw, k_neg))
    lam = torch.where(nonneg, torch.full_like(lw, lambda_pos), torch.full_like(lw, lambda_neg)).clamp(min=1e-4)
    return torch.exp(lam + k * lw - lam * lw.exp()).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


@register("clip", "vespo", check=_check_vespo, level="sequence", single_update="is plain -A log pi (phi(1) = 1)")
def vespo(
    logp: Tensor,
    logp_old: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> ClipResult:
    """VESPO: loss = -sg(phi(w_i)) A log pi per token, w_i = pi(o_i)/pi_old(o_i) the *product* of the
    row's token ratios (the `sequence` level: sum of the clamped token log-ratios), phi the gamma
    weight `vespo_weight` (k, lambda by the sign of each token's A; TRL's A is one per row, equal for
    sequence-level estimators). The loss value contains log pi (as `cispo`); d loss / d logp = -phi A.
    TRL aggregates it token-mean. Flags all False; `ratio` holds the token ratio.
    logp, logp_old, adv, mask: [N, T]. Defaults: TRL GRPOConfig vespo_k_pos 2, vespo_lambda_pos 3,
    vespo_k_neg 3, vespo_lambda_neg 2. Source: TRL `get_gamma_weights` / `_compute_loss` ("vespo").
    TRL folds the vLLM token IS ratio into w; here a `correction` multiplies the loss instead."""
    _check_vespo({"k_pos": k_pos, "lambda_pos": lambda_pos, "k_neg": k_neg, "lambda_neg": lambda_neg}, {})
    m, logp_s, log_ratio, a = prepare(logp, logp_old, adv, mask)
    seq = log_ratio.detach().sum(1, keepdim=True).expand_as(log_ratio)  # [N, T], log of the product
    phi = vespo_weight(seq, a, k_pos, lambda_pos, k_neg, lambda_neg)  # [N, T]
    never = torch.zeros_like(m)
    return clip_result(-phi * a * logp_s, never, never, log_ratio.exp(), m)


@register("clip", "luspo", check=_check_low_high, level="sequence")
def luspo(
    logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float = 0.2, eps_high: float = 0.2
) -> ClipResult:
    """LUSPO: GSPO's clipped sequence ratio (the `gspo` rule, eps as TRL's epsilon 0.2 defaults), each
    real token carrying the row's loss, so with `aggregate: seq_mean_token_sum` the step's loss is
    TRL's mean_i (L_i |o_i|): every sequence weighted by its length (no 1/|o_i|, hence
    "length-unbiased"). The `luspo` variant sets that aggregate. logp, logp_old, adv, mask: [N, T].
    Source: TRL `_compute_loss`, loss_type "luspo" (importance_sampling_level "sequence")."""
    return gspo(logp, logp_old, adv, mask, eps_low=eps_low, eps_high=eps_high)
