"""What a step works with: a variant's built components (`Slots`), the models, the settings, and
the run's mutable state (`RunState`, what a checkpoint saves)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from zoo import guards, registry
from zoo.declarations import of as declared
from zoo.config.desugar import kl_parts
from zoo.config.variant import KLSpec, Variant, build_components


@dataclass
class Slots:
    """A variant's built components, one field per slot of zoo/kinds.py, with the `kl:` slot
    expanded (zoo/config/desugar.py): placement loss adds the `kl` loss term to `loss`, placement reward
    sets `kl_reward` (the estimator of the kl_reward stage), `adaptive` adds the `adaptive_kl`
    controller to `controllers`."""

    advantage: registry.Component
    normalizer: registry.Component
    objective_norm: registry.Component
    clip: registry.Component
    aggregate: registry.Component
    length: list[registry.Component]
    filter: list[registry.Component]
    critic: registry.Component | None
    loss: list[registry.Component]
    correction: list[registry.Component]
    controllers: list[registry.Component]
    kl: KLSpec
    kl_reward: registry.Component | None = None

    @staticmethod
    def of(v: Variant, context: Mapping[str, Any] | None = None) -> "Slots":
        c = build_components(v, context)
        kl = v.slots.kl_spec()
        parts = kl_parts(kl)
        if parts.loss_term is not None:
            c["loss"] = c["loss"] + [registry.build("loss", parts.loss_term)]
        if parts.controller is not None:
            c["controllers"] = c["controllers"] + [registry.build("controller", parts.controller)]
        est = registry.build("kl_estimator", parts.reward_estimator) if parts.reward_estimator else None
        return Slots(kl=kl, kl_reward=est, **c)

    def step_components(self) -> list[Any]:
        """The components that read fields of the step: the advantage estimator, clip rule, loss terms,
        corrections, length components, filters, the critic and the KL in the reward."""
        one = [c for c in (self.advantage, self.clip, self.critic, self.kl_reward) if c is not None]
        return [*one, *self.loss, *self.correction, *self.length, *self.filter]

    def reads(self, name: str) -> bool:
        """Whether any component of the variant reads field `name`, so the step computes it: "values"
        builds and runs the critic, "logp_ref" the reference model, "logp_old" the old forward (the
        KL in the reward reads both)."""
        return any(name in declared(c).reads for c in self.step_components()) or (
            name in ("logp_ref", "logp_old") and self.kl_reward is not None)

    def needs_grad(self, name: str) -> bool:
        """Whether a loss term needs the gradient of field `name` (e.g. the entropy bonus)."""
        return any(name in declared(c).grad for c in self.loss)


@dataclass
class Models:
    """policy (trainable), reference (callable model or None: no KL), critic (value model or None)."""

    policy: torch.nn.Module
    tokenizer: Any
    reference: Callable[[], contextlib.AbstractContextManager] | None
    critic: torch.nn.Module | None = None
    parallel: Any = None  # zoo.strategy.Parallel: the training strategy's wrappers (None: one process, plain)


@dataclass
class StepSettings:
    temperature: float
    micro_batch: int
    max_new_tokens: int
    epochs: int
    minibatches: int
    autocast: str  # "none" | "bf16" | "fp16" (resolved: never "auto")
    max_grad_norm: float | None
    generate_batch: int | None = None  # completions per generate call (sampling.batch_size resolved; None: max(G, 32))


@dataclass
class RunState:
    """Everything the loop mutates; what a checkpoint saves."""

    cfg: Any  # zoo.config.run.RunConfig
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
    controllers: list[Any] = field(default_factory=list)  # built controllers (zoo/components/controllers.py)
    gold: list[Any] = field(default_factory=list)  # built gold rewards: logged as gold/<name>, never trained on
    step: int = 0
    totals: dict[str, float] = field(default_factory=lambda: {"completions": 0.0, "tokens": 0.0, "elapsed": 0.0})
    guard: guards.GuardState = field(default_factory=guards.GuardState)  # streaks of the run guards
    provenance: dict[str, Any] = field(default_factory=dict)
    generator: Any = None  # zoo.kinds.Generator built from cfg.sampling.backend (None: the hf generator)
