"""What a step works with: a variant's built components (`Slots`), the models, the settings, and
the run's mutable state (`RunState`, what a checkpoint saves)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from zoo import registry
from zoo.variant import KLSpec, Variant, build_components


@dataclass
class Slots:
    """A variant's built components (what fills each slot)."""

    advantage: registry.Component
    normalizer: registry.Component
    objective_norm: registry.Component
    clip: registry.Component
    aggregate: registry.Component
    length: list[registry.Component]
    filter: list[registry.Component]
    critic: registry.Component | None
    kl: KLSpec
    kl_estimator: registry.Component | None

    @staticmethod
    def of(v: Variant, context: Mapping[str, Any] | None = None) -> "Slots":
        c = build_components(v, context)
        kl = v.slots.kl_spec()
        est = registry.build("kl_estimator", kl.estimator) if kl.placement != "none" else None
        return Slots(kl=kl, kl_estimator=est, **c)


@dataclass
class Models:
    """policy (trainable), reference (callable model or None: no KL), critic (value model or None)."""

    policy: torch.nn.Module
    tokenizer: Any
    reference: Callable[[], contextlib.AbstractContextManager] | None
    critic: torch.nn.Module | None = None


@dataclass
class StepSettings:
    temperature: float
    micro_batch: int
    max_new_tokens: int
    epochs: int
    minibatches: int
    entropy_coef: float
    autocast: str  # "none" | "bf16" | "fp16" (resolved: never "auto")
    max_grad_norm: float | None


@dataclass
class RunState:
    """Everything the loop mutates; what a checkpoint saves."""

    cfg: Any  # zoo.config.RunConfig
    variant: Variant
    slots: Slots
    models: Models
    settings: StepSettings
    optimizer: torch.optim.Optimizer
    scheduler: Any
    critic_optimizer: torch.optim.Optimizer | None
    critic_scheduler: Any
    stream: Any
    resample_stream: Any
    task: Any
    rewards: list[tuple[Any, float]]
    reward_names: list[str]
    reference: Any
    device: torch.device
    beta: float
    step: int = 0
    totals: dict[str, float] = field(default_factory=lambda: {"completions": 0.0, "tokens": 0.0, "elapsed": 0.0})
    provenance: dict[str, Any] = field(default_factory=dict)
