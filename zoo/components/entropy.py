"""Entropy mechanisms: token selection by entropy (a correction) and adaptive entropy control (a
controller for the `entropy_bonus` loss term).

- `high_entropy_tokens` (Wang et al. 2025, "Beyond the 80/20 Rule", arXiv:2506.01939): the policy
  gradient only on the top-rho fraction of the optimizer step's tokens by entropy.
- `adaptive_entropy` (Skywork-OR1, He et al. 2025, arXiv:2505.22312 §3.2.4 "Adaptive Entropy
  Control"): the entropy bonus's coefficient moves by delta toward a target entropy each step and
  the bonus is on only while the entropy is at or below the target.

Shapes: M rows of the optimizer step (all ranks), n rows of a micro-batch, T completion tokens.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.core.registry import register
from zoo.core.types import TermInputs


def linear_quantile(values: Tensor, q: float) -> Tensor:
    """The q-quantile of a 1-D tensor with linear interpolation between the two nearest order
    statistics (numpy/torch's default `linear`): position p = q (n - 1) in the sorted values,
    s[floor p] + (s[ceil p] - s[floor p]) (p - floor p). Equal to `torch.quantile(values, q)` but
    without its 2^24-element limit. values: [n], n >= 1. Raises ValueError for q outside [0, 1] or
    an empty input."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1], got {q}")
    if values.numel() == 0:
        raise ValueError("quantile of an empty tensor")
    s = values.flatten().sort().values
    pos = q * (s.numel() - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def top_entropy_mask(entropy: Tensor, mask: Tensor, rho: float) -> Tensor:
    """True on the real tokens whose entropy is at least the (1 - rho)-quantile (linear
    interpolation) of the real tokens' entropies: the top-rho fraction, every token tied at the
    threshold kept (TRL `get_high_entropy_mask` with `top_entropy_quantile` = rho). rho = 1 keeps
    every real token, rho = 0 only those at the maximum. entropy, mask: [M, T]; padding may hold
    anything (NaN, inf): it is never read. Returns [M, T] bool; all False without real tokens.
    Source: arXiv:2506.01939 §4 (eq. 5: I[H_t >= tau_rho], tau_rho the top-rho quantile of the
    batch's token entropies)."""
    real = mask.bool()
    if not real.any():
        return torch.zeros_like(real)
    threshold = linear_quantile(entropy[real].float(), 1.0 - rho)
    return real & (torch.where(real, entropy.float(), torch.zeros_like(entropy, dtype=torch.float)) >= threshold)


def _check_rho(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not 0.0 <= float(params["rho"]) <= 1.0:
        raise ValueError(f"rho must be in [0, 1] (the fraction of tokens kept), got {params['rho']}")


@register("correction", "high_entropy_tokens", check=_check_rho, reads=("entropy",), selects=True)
def high_entropy_tokens(inp: TermInputs, *, rho: float = 0.2, scope: str = "step") -> Tensor:
    """1 on the top-`rho` fraction of the optimizer step's real tokens by entropy (ties at the
    threshold kept), 0 elsewhere -> [n, t], a weight on the clip rule's per-token loss: the policy
    gradient flows only through the high-entropy "forking" tokens; the KL and other loss terms keep
    every token. The entropy is the current policy's, from the step's no-grad forward (`inp.step`),
    selected over the whole optimizer step on every rank (`scope: micro`: within each micro-batch,
    as TRL selects per local batch). Default rho 0.2: arXiv:2506.01939 §4 (the top 20% of tokens).
    Raises ValueError without the step view (the update builds it for `selects=True`)."""
    v = inp.step
    if v is None or "entropy" not in v.fields:
        raise ValueError("correction 'high_entropy_tokens' needs the step's entropy view (inp.step)")
    keep = top_entropy_mask(v.fields["entropy"], v.fields["mask"], rho)  # [M, T]
    return v.local(keep.float(), like=inp.logp)


class AdaptiveEntropy:
    """Skywork-OR1's adaptive entropy control (arXiv:2505.22312 §3.2.4): with e_k the step's
    token-mean entropy and c_k the coefficient,
        c_{k+1} = clamp(c_k + delta if e_k < target, c_k - delta if e_k > target, else c_k; 0, max_coef)
    and the entropy bonus is on only while e <= target: the coefficient used is c * I[e <= target].
    The entropy is the one the update measured (metric `entropy`, the token mean over the step's
    training forwards), so the gate of step k+1 uses e_k (the paper gates step k on e_k itself,
    known only after its rollout; here a controller sets coefficients before the step). Before any
    entropy is measured the bonus is off. It sets `coef` of the loss term `entropy_bonus`."""

    def __init__(self, target: float, delta: float, coef: float, max_coef: float):
        self.target, self.delta, self.max_coef = float(target), float(delta), float(max_coef)
        self.coef = float(coef)
        self.entropy = float("nan")  # the last measured entropy (NaN: none yet)

    def coefficients(self) -> dict[str, dict[str, float]]:
        on = self.entropy <= self.target  # False while NaN
        return {"entropy_bonus": {"coef": self.coef if on else 0.0}}

    def update(self, metrics: Mapping[str, float], tokens: float, rows: float) -> None:
        """metrics["entropy"] is the step's token mean over every rank (the update reduces it), so no
        collective is needed. No entropy measured (NaN, no tokens): unchanged."""
        e = float(metrics.get("entropy", float("nan")))
        if e != e:
            return
        step = self.delta if e < self.target else -self.delta if e > self.target else 0.0
        self.coef = min(max(self.coef + step, 0.0), self.max_coef)
        self.entropy = e

    def state_dict(self) -> dict[str, float]:
        return {"coef": self.coef, "entropy": self.entropy}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.coef, self.entropy = float(state["coef"]), float(state["entropy"])


def _check_adaptive_entropy(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not float(params["target"]) >= 0:
        raise ValueError(f"target must be >= 0 (an entropy in nats), got {params['target']}")
    if not float(params["delta"]) > 0:
        raise ValueError(f"delta must be > 0, got {params['delta']}")
    if not 0 <= float(params["coef"]) <= float(params["max_coef"]):
        raise ValueError(f"coef must be in [0, max_coef = {params['max_coef']}], got {params['coef']}")


@register("controller", "adaptive_entropy", check=_check_adaptive_entropy, sets=("entropy_bonus.coef",))
def adaptive_entropy(
    *, target: float = 0.2, delta: float = 0.005, coef: float = 0.0, max_coef: float = 1.0
) -> AdaptiveEntropy:
    """A fresh AdaptiveEntropy for the `entropy_bonus` loss term (the variant must have it).
    Defaults: target 0.2 nats, delta 0.005 (arXiv:2505.22312 §3.2.4, tgt-ent 0.2 and
    Delta 0.005 in their runs; TRL's defaults), c_0 = 0 (the paper's initial coefficient),
    coefficient clamped to [0, max_coef = 1]."""
    return AdaptiveEntropy(target, delta, coef, max_coef)
