"""Controllers (kind "controller", slot `controllers`, a list): stateful coefficients that move with
the run. A controller reads the step's metrics and sets a hyperparameter of a loss term (by the
term's name) for the next step; its state is saved in checkpoints, so a resumed run continues with
the value the uninterrupted run would have had.

The registered function builds a fresh controller from its spec: `fn(*, hyperparameters) -> obj`
with `coefficients()`, `update(metrics, tokens, rows)`, `state_dict()`, `load_state_dict()`
(the `Controller` protocol of zoo/core/kinds.py).
"""

from __future__ import annotations

from typing import Mapping

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
