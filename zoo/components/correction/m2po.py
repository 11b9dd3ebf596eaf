"""M2PO's second-moment token mask and IcePop's band, as corrections (kind "correction").

M2PO (Zheng et al., "Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on
LLMs?", arXiv 2510.01161; AReaL, Trinity-RFT) bounds the second moment of the log-ratio between the
behaviour policy (the sampler: logp_rollout) and the proximal policy (the trainer at rollout time:
logp_old) over the whole optimizer step: with d_t = logp_rollout_t - logp_old_t on the step's real
tokens, it masks the tokens of largest d^2 until the mean of d^2 over the tokens left is <= tau. It
is a selection over the step (registered `selects=True`: the same tokens for any micro-batch split or
number of ranks), not a per-token correction: whether a token is masked depends on every other token.

Conventions (ours): tokens with equal d^2 are masked together, so the mask does not depend on row
order (the paper's "drop the largest one at a time" would split a tie by position); a masked token
gets weight 0 on the clip term and still counts in the aggregation's denominator (as every
correction here). tau = 0.04 as we read the paper (§4; not re-checked against its text, nor against
AReaL's code, which we could not read).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.correction.base import _check_mis, mis
from zoo.core.registry import register
from zoo.core.types import TermInputs


def second_moment_keep(d2: Tensor, tau: float) -> Tensor:
    """The tokens M2PO keeps: d2 [K] (float64, the real tokens' squared log-ratios) -> keep [K] bool.
    Masks the values of largest d2, all copies of a value at once, until the mean of the kept values is
    <= tau (nothing masked when it already is; everything masked when no prefix works)."""
    if d2.numel() == 0:
        return torch.zeros_like(d2, dtype=torch.bool)
    x, _ = torch.sort(d2, descending=True)  # [K]
    n = x.numel()
    suffix_sum = x.flip(0).cumsum(0).flip(0)  # suffix_sum[k] = sum x[k:]
    counts = torch.arange(n, 0, -1, dtype=x.dtype)
    mean_left = suffix_sum / counts  # mean after masking the k largest, k = 0..n-1
    boundary = torch.ones(n, dtype=torch.bool)
    boundary[1:] = x[1:] < x[:-1]  # masking k tokens never splits a tie
    ok = (mean_left <= tau) & boundary
    if not ok.any():
        return torch.zeros_like(d2, dtype=torch.bool)
    k = int(ok.nonzero()[0])
    return d2 <= x[k]  # x[k] is the largest value kept (k = 0: every token)


def _check_tau(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    t = params["tau"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
        raise ValueError(f"tau must be a finite number > 0, got {t!r}")
    if params["scope"] not in ("step", "micro"):
        raise ValueError(f"scope must be step or micro, got {params['scope']!r}")


@register("correction", "m2po", check=_check_tau, reads=("logp_old", "logp_rollout"), selects=True)
def m2po(inp: TermInputs, *, tau: float = 0.04, scope: str = "step") -> Tensor:
    """1 on the tokens M2PO keeps, 0 on those it masks -> [n, t] (module docstring): the largest
    (logp_rollout - logp_old)^2 of the optimizer step are masked until their mean over the kept real
    tokens is <= tau. Over the whole step (`scope: micro`: within each micro-batch). Padding is never
    read. Raises ValueError without the step view or the sampler's log-probs.
    Source: arXiv 2510.01161 (M2PO, second-moment trust region; tau 0.04)."""
    v = inp.step
    if v is None or "logp_rollout" not in v.fields:
        raise ValueError(
            "correction 'm2po' needs the step view with the sampler's log-probs (logp_rollout): "
            "use a generator that reports them (sampling.backend)"
        )
    real = v.fields["mask"].bool()  # [M, T]
    d = v.fields["logp_rollout"].double() - v.fields["logp_old"].double()
    keep = torch.zeros_like(real)
    keep[real] = second_moment_keep(d[real] ** 2, tau)
    return v.local(keep.float(), like=inp.logp)


@register("correction", "icepop", check=_check_mis, reads=("logp_old", "logp_rollout"))
def icepop(inp: TermInputs, *, c_low: float = 0.5, c_high: float = 5.0, level: str = "token") -> Tensor:
    """IcePop: the `mis` band under its own name, w = rho where c_low <= rho <= c_high, else 0, rho =
    pi_old / pi_rollout per token (the same code as `mis`; tested equal). Defaults alpha 0.5, beta
    5.0: Ring-1T arXiv 2510.18855 (IcePop), as we read it (not re-checked against the text; verl's
    "0.5_2.0" IcePop example uses beta 2). inp.logp_old, inp.logp_rollout, inp.mask: [n, T]."""
    return mis(inp, c_low=c_low, c_high=c_high, level=level)
