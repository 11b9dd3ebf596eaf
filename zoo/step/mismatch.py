"""The sampler/trainer mismatch and the rollout corrections' weights, as step metrics (`rollout/*`).

Logged whenever the batch carries the sampler's log-probs (`Batch.logp_rollout`), also without a
correction, so the mismatch shows before one is chosen. Everything comes from forwards the step
already does: logp_old is the rollout-time forward when the step computes it, else (one on-policy
update) the update's own forward, which equals it. Shapes: n rows of a micro-batch, T tokens.

    d = logp_rollout - logp_old, r = pi_old / pi_rollout = exp(-d)
    rollout/mismatch_kl = token mean of k3 = r - 1 - log r = exp(-d) - 1 + d

k3 on tokens drawn from the rollout policy is an unbiased, non-negative estimate of
KL(pi_rollout || pi_old) (Schulman 2020, "Approximating KL Divergence"; verl's rollout-correction
`rollout_corr/k3_kl`). d is clamped to [-20, 20] before `exp`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.components.stats import as_bool, masked_sum, sanitize
from zoo.core import dist
from zoo.core.fields import declared_reads

LOG_RATIO_CLAMP = 20.0


def mismatch_k3(logp_old: Tensor, logp_rollout: Tensor, mask: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi_rollout || pi_old) on the sampled tokens, [n, T], 0 on
    padding (padded slots of both inputs are selected away first). logp_old, logp_rollout, mask:
    [n, T]."""
    m = as_bool(mask)
    d = sanitize(logp_rollout.detach().float(), m) - sanitize(logp_old.detach().float().to(logp_rollout.device), m)
    d = d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return sanitize(torch.exp(-d) - 1.0 + d, m)


def rollout_weight(acc: Tensor | None, component: Any, weight: Tensor) -> Tensor | None:
    """The product of the weights of the rollout corrections so far: `acc` times `weight` when
    `component` (a correction) reads logp_rollout, else `acc` unchanged. weight: [n, T]."""
    if "logp_rollout" not in declared_reads(component):
        return acc
    return weight.detach() if acc is None else acc * weight.detach()


@dataclass
class RolloutTally:
    """Sums over the real tokens of every micro-batch of one rollout step's updates, on this rank:
    the mismatch (tokens with logp_rollout) and the rollout corrections' weight (tokens with one)."""

    tokens: float = 0.0  # real tokens whose batch has logp_rollout
    k3: float = 0.0
    weighted: float = 0.0  # real tokens weighted by a rollout correction
    weight: float = 0.0
    masked: float = 0.0  # ... whose weight is 0
    weight_max: float = float("-inf")

    def add(self, logp_old: Tensor, logp_rollout: Tensor | None, weight: Tensor | None, mask: Tensor) -> None:
        """One micro-batch. logp_old, logp_rollout (None: the generator does not report them),
        weight (the rollout corrections' product, None without one), mask: [n, T]."""
        if logp_rollout is None:
            return
        m = as_bool(mask)
        self.tokens += float(m.sum())
        self.k3 += float(mismatch_k3(logp_old, logp_rollout, m).sum())
        if weight is not None:
            w = sanitize(weight.detach().float(), m)
            self.weighted += float(m.sum())
            self.weight += float(masked_sum(w, m))
            self.masked += float((m & (w == 0)).sum())
            if m.any():
                self.weight_max = max(self.weight_max, float(w[m].max()))

    def metrics(self) -> dict[str, float]:
        """rollout/mismatch_kl (with logp_rollout), rollout/weight_mean, rollout/weight_max,
        rollout/masked_frac (with a rollout correction): over every rank (collectives on every
        rank, also one without rows); {} when no rank saw logp_rollout."""
        seen = dist.all_gather_object((self.tokens > 0, self.weighted > 0, self.weight_max))
        if not any(s[0] for s in seen):
            return {}
        t = dist.all_reduce_sum(
            torch.tensor([self.tokens, self.k3, self.weighted, self.weight, self.masked], dtype=torch.float64)
        ).tolist()
        out = {"rollout/mismatch_kl": t[1] / t[0]}
        if any(s[1] for s in seen):
            out.update(
                {
                    "rollout/weight_mean": t[3] / t[2],
                    "rollout/weight_max": max(s[2] for s in seen),
                    "rollout/masked_frac": t[4] / t[2],
                }
            )
        return out
