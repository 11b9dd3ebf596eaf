"""Token selection by entropy (a correction): `high_entropy_tokens` (Wang et al. 2025, "Beyond the
80/20 Rule", arXiv:2506.01939), the policy gradient only on the top-rho fraction of the optimizer
step's tokens by entropy. Its partner among the entropy mechanisms, the `adaptive_entropy` controller
of the `entropy_bonus` loss term, is in zoo/components/controllers.py.

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
