"""The `kl:` slot as users write it, turned into what the step runs (docs/concepts/engine.md, "The loss as
terms"; the setting: docs/reference/components.md, "kl_estimator and the `kl` slot"): placement `loss` becomes
the loss term `kl`, placement `reward` the kl_reward stage's estimator, and `adaptive: {target,
horizon}` the controller `adaptive_kl` that moves beta.

    kl: {placement: loss, estimator: k3, beta: 0.04}
      -> loss: [..., {name: kl, estimator: k3, beta: 0.04}]
    kl: {placement: reward, estimator: k1, beta: 0.05, adaptive: {target: 6, horizon: 10000}}
      -> kl_reward: k1 at beta 0.05;  controllers: [..., {name: adaptive_kl, target: 6, horizon: 10000, beta: 0.05}]

The `kl` term and the `adaptive_kl` controller are made only this way: writing them by hand in
`loss:` / `controllers:` is a validation error (`hand_written`), so one KL has one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: names only the `kl:` slot may produce, by the list slot they would appear in
RESERVED = {"loss": "kl", "controllers": "adaptive_kl"}
#: the kl: slot's name as a controller target ("kl.beta"): its loss term's and its KL in the reward's
KL_NAME = RESERVED["loss"]


@dataclass(frozen=True)
class KLParts:
    """loss_term: the `kl` loss-term spec or None; reward_estimator: the estimator name of the KL in
    the reward or None; controller: the `adaptive_kl` spec or None."""

    loss_term: dict[str, Any] | None
    reward_estimator: str | None
    controller: dict[str, Any] | None

    @property
    def enabled(self) -> bool:
        """Whether the step needs the reference model's log-probs for the KL."""
        return self.loss_term is not None or self.reward_estimator is not None


def kl_parts(kl: Any) -> KLParts:
    """Expand a `KLSpec` (zoo.config.variant) into its parts. Raises ValueError on an unknown placement."""
    where = {"loss": (True, False), "reward": (False, True), "none": (False, False)}
    if kl.placement not in where:
        raise ValueError(f"kl.placement {kl.placement!r}: use one of {', '.join(where)}")
    in_loss, in_reward = where[kl.placement]
    term = {"name": KL_NAME, "estimator": kl.estimator, "beta": kl.beta} if in_loss else None
    if term is not None and getattr(kl, "bias_correction", False):
        term["bias_correction"] = True
    ctrl = None
    if kl.adaptive is not None and (in_loss or in_reward):
        ctrl = {"name": "adaptive_kl", "target": kl.adaptive.target, "horizon": kl.adaptive.horizon, "beta": kl.beta}
    return KLParts(term, kl.estimator if in_reward else None, ctrl)


def hand_written(slots: Any) -> list[str]:
    """The reserved names a variant's `loss:` / `controllers:` lists name by hand (each an error)."""
    out = []
    for slot, name in RESERVED.items():
        for spec in getattr(slots, slot, None) or []:
            if (spec if isinstance(spec, str) else spec.get("name")) == name:
                out.append(
                    f"key 'slots.{slot}': {name!r} comes from the kl: slot (placement"
                    f"{'/adaptive' if slot == 'controllers' else ''}); do not write it by hand, "
                    "set kl: {placement: loss | reward, estimator, beta, adaptive: {target, horizon}}"
                )
    return out
