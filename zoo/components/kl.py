"""KL to the reference policy: per-token estimators (kind "kl_estimator"), where the KL goes
(placement), the in-reward term and the adaptive coefficient.

Estimators are `fn(logp [N, T], ref_logp [N, T]) -> [N, T]` with d = logp - ref_logp (a single
sample from the policy; rho = pi_ref / pi = exp(-d)): k1 = d, k2 = d^2 / 2, k3 = rho - 1 - log rho.
They are elementwise; use `masked_kl` to apply one to padded batches (it selects padding away first,
so NaN/inf in a padded ref log-prob reach neither the value nor the gradient, case C7).
Sources: Schulman, "Approximating KL divergence" (2020 note) for k1/k2/k3; GRPO arXiv 2402.03300
eq. 4 (k3 in the loss); Ziegler et al. arXiv 1909.08593 §2.2 (k1 in the reward, adaptive beta).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from zoo.components.stats import as_bool, check_same_shape, sanitize
from zoo.core.registry import register

K3_LOG_RATIO_CLAMP = 20.0
K3_MAX = 10.0


# ---------------------------------------------------------------- estimators
@register("kl_estimator", "k1")
def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = d = logp - ref_logp (unbiased, can be negative; as a loss its expected gradient is 0).

    logp, ref_logp: [N, T]. Returns [N, T]. Raises ValueError when shapes differ.
    Source: Schulman 2020 KL note; Ziegler et al. arXiv 1909.08593 §2.2 (per-token KL in the reward)."""
    check_same_shape(logp=logp, ref_logp=ref_logp)
    return logp - ref_logp


@register("kl_estimator", "k2")
def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = d^2 / 2, d = logp - ref_logp (biased, low variance, >= 0).

    logp, ref_logp: [N, T]. Returns [N, T]. Raises ValueError when shapes differ.
    Source: Schulman 2020 KL note."""
    check_same_shape(logp=logp, ref_logp=ref_logp)
    return 0.5 * (logp - ref_logp) ** 2


@register("kl_estimator", "k3")
def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(-d) + d - 1 (= rho - 1 - log rho >= 0), d = logp - ref_logp clamped to [-20, 20]
    before exp and the result clamped to <= 10 (as verl does), so one extreme token cannot overflow.

    logp, ref_logp: [N, T]. Returns [N, T]. Raises ValueError when shapes differ.
    Source: GRPO, DeepSeekMath arXiv 2402.03300 eq. 4; Schulman 2020 KL note; clamps from verl."""
    check_same_shape(logp=logp, ref_logp=ref_logp)
    d = (logp - ref_logp).clamp(-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)  # [N, T]
    return (torch.exp(-d) + d - 1.0).clamp(max=K3_MAX)


def masked_kl(estimator: Callable[[Tensor, Tensor], Tensor], logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """A KL estimator applied to a padded batch: 0 on padding, finite value and gradient whatever the
    padded slots hold (logp and ref_logp are selected to 0 there *before* the estimator runs).

    estimator: a kl_estimator component or function; logp (with gradient when KL is in the loss),
    ref_logp, mask: [N, T]. Returns [N, T]. Raises ValueError when shapes differ.
    Source: docs/concepts/algorithms.md "Our conventions" (sanitise before arithmetic)."""
    check_same_shape(logp=logp, ref_logp=ref_logp, mask=mask)
    m = as_bool(mask)  # [N, T]
    k = estimator(sanitize(logp, m), sanitize(ref_logp.detach(), m))  # [N, T], d = 0 on padding
    return sanitize(k, m)


def kl_reward(k: Tensor, mask: Tensor, beta: float) -> Tensor:
    """Per-token KL reward for placement "reward": -beta * k on real tokens, 0 on padding.

    k: [N, T] per-token estimate (of logp_old vs ref); detached here, since a reward carries no
    gradient. mask: [N, T]; beta: >= 0. Returns [N, T] (padding selected away, so NaN there is 0).
    Raises ValueError when shapes differ or beta < 0.
    Source: Ziegler et al. arXiv 1909.08593 §2.2 (r_t = -beta * (log pi_old - log pi_ref))."""
    check_same_shape(k=k, mask=mask)
    if not beta >= 0:
        raise ValueError(f"beta must be >= 0, got {beta!r}")
    return sanitize(-beta * sanitize(k.detach(), mask), mask)


# ---------------------------------------------------------------- adaptive coefficient
def adaptive_beta(beta: float, kl: float, target: float, horizon: float, n_steps: float) -> float:
    """Next KL coefficient of the adaptive controller:
    beta * (1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon).

    beta: current coefficient (>= 0); kl: measured KL of the last batch (per sequence, nats);
    target: wanted KL (> 0); horizon: episodes over which to close the gap (> 0; 10,000 in the
    code); n_steps: episodes since the last update (the batch size). Returns a float.
    Raises ValueError for a non-finite kl, target <= 0, horizon <= 0, beta < 0 or n_steps < 0.
    Source: Ziegler et al. arXiv 1909.08593 §2.2; openai/lm-human-preferences `AdaptiveKLController`."""
    if not (target > 0 and horizon > 0 and beta >= 0 and n_steps >= 0):
        raise ValueError(
            f"adaptive KL needs target > 0, horizon > 0, beta >= 0, n_steps >= 0; "
            f"got target={target!r}, horizon={horizon!r}, beta={beta!r}, n_steps={n_steps!r}"
        )
    kl = float(kl)
    if kl != kl or kl in (float("inf"), float("-inf")):
        raise ValueError(f"adaptive KL: measured kl must be finite, got {kl!r}")
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return float(beta) * (1.0 + error * n_steps / horizon)
