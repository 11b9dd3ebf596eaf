"""Controllers (kind "controller", slot `controllers`, a list): stateful coefficients that move with
the run. A controller reads the step's metrics and sets a hyperparameter of a loss term (by the
term's name) for the next step; its state is saved in checkpoints, so a resumed run continues with
the value the uninterrupted run would have had.

The registered function builds a fresh controller from its spec: `fn(*, hyperparameters) -> obj`
with `coefficients()`, `update(metrics, tokens, rows)`, `state_dict()`, `load_state_dict()`
(the `Controller` protocol of zoo/core/kinds.py).

- `adaptive_kl` (Ziegler et al. arXiv:1909.08593 §2.2): the KL coefficient `beta` of the `kl` term
  (and of the KL in the reward) moves toward a target KL per completion;
- `adaptive_entropy` (Skywork-OR1, He et al. 2025, arXiv:2505.22312 §3.2.4 "Adaptive Entropy
  Control"): the entropy bonus's coefficient moves by delta toward a target entropy each step and
  the bonus is on only while the entropy is at or below the target.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from zoo.components.kl import adaptive_beta
from zoo.core import dist
from zoo.core.registry import register


class AdaptiveKL:
    """Ziegler et al. (arXiv:1909.08593 §2.2) adaptive KL coefficient: after each step
    beta <- beta * (1 + clip(KL / target - 1, -0.2, 0.2) * n / horizon), with KL the step's mean KL to
    the reference per completion and n the step's completions, over every rank. It sets `beta` of the
    `kl` loss term, and the coefficient of the KL in the reward (also named `kl`)."""

    def __init__(self, target: float, horizon: int, beta: float):
        self.target, self.horizon, self.beta = float(target), int(horizon), float(beta)

    def coefficients(self) -> dict[str, dict[str, float]]:
        return {"kl": {"beta": self.beta}}

    def update(self, metrics: Mapping[str, float], tokens: float, rows: float) -> None:
        """metrics["kl/ref"] is a token mean (this rank's with the KL in the reward, already the step's
        with the KL in the loss); either way the sum over ranks of mean x local tokens is the step's
        KL sum. A collective: every rank calls it, with or without rows. No KL measured: unchanged."""
        part = float(metrics.get("kl/ref", float("nan"))) * tokens if tokens else 0.0
        kl_sum, n = dist.all_reduce_sum(torch.tensor([part, float(rows)], dtype=torch.float64)).tolist()
        if n == 0 or kl_sum != kl_sum:
            return
        self.beta = adaptive_beta(self.beta, kl_sum / n, self.target, self.horizon, n)

    def state_dict(self) -> dict[str, float]:
        return {"beta": self.beta}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.beta = float(state["beta"])


def _check_adaptive_kl(params, context) -> None:
    if not float(params.get("target", 0)) > 0 or not int(params.get("horizon", 10_000)) > 0:
        raise ValueError("adaptive_kl needs target > 0 and horizon > 0")


@register("controller", "adaptive_kl", check=_check_adaptive_kl, sets=("kl.beta",))
def adaptive_kl(*, target: float, horizon: int = 10_000, beta: float = 0.0) -> AdaptiveKL:
    """A fresh AdaptiveKL starting at `beta` (the `kl:` slot's beta). Made from `kl: {adaptive:
    {target, horizon}}`; writing it by hand is a validation error. Source: Ziegler et al.
    arXiv:1909.08593 §2.2 (target KL per sequence, horizon 10,000 episodes)."""
    return AdaptiveKL(target, horizon, beta)


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
