"""What a step works with: a variant's built components (`Slots`), the models, the settings, and
the run's mutable state (`RunState`, what a checkpoint saves)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from zoo.config.desugar import KL_NAME, kl_parts
from zoo.config.distill import DistillSignal
from zoo.config.variant import KLSpec, Variant, build_components
from zoo.core import guards, registry
from zoo.core.declarations import Declaration
from zoo.core.declarations import of as declared
from zoo.core.stages import active as active_stages


@dataclass(frozen=True)
class KLReward:
    """The kl: slot's placement `reward`: the kl_reward stage's estimator (a `kl_estimator` component)
    and coefficient. `name` is the kl: slot's target, the one its controller sets (`kl.beta`), so the
    stage's beta is looked up like a loss term's hyperparameters (`params`)."""

    estimator: registry.Component
    beta: float
    name: str = KL_NAME
    kind: str = "kl_estimator"
    decl: Declaration = Declaration(reads=("logp_old", "logp_ref"))

    def resolved(self) -> dict[str, float]:
        return {"beta": self.beta}


def params(component: Any, coefs: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """What a controller set for `component` now (coefs: {target: {hyperparameter: value}}, targets
    by component name), over nothing: the keywords a loss term is called with."""
    return dict(coefs.get(getattr(component, "name", ""), {}))


@dataclass
class Slots:
    """A variant's built components, one field per slot of zoo/core/kinds.py, with the `kl:` slot
    expanded (zoo/config/desugar.py): placement loss adds the `kl` loss term to `loss`, placement reward
    sets `kl_reward` (the kl_reward stage's estimator and beta, `KLReward`), `adaptive` adds the
    `adaptive_kl` controller to `controllers`."""

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
    kl_reward: KLReward | None = None
    stages: list[registry.Component] = field(
        default_factory=list
    )  # plugin stages some component reads (zoo/core/stages.py)
    distill: DistillSignal | None = None  # the variant's `distill:` (a teacher's signal, zoo/step/distill.py)

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
        s = Slots(kl=kl, kl_reward=KLReward(est, kl.beta) if est is not None else None, **c)
        s.distill = DistillSignal(v.distill) if v.distill is not None else None
        s.stages = active_stages(s.step_components())
        return s

    def step_components(self) -> list[Any]:
        """The components that read fields of the step: every slot's but the aggregation and the
        controllers, the KL in the reward, and the plugin stages some of them read (`stages`)."""
        one = [
            c
            for c in (
                self.advantage,
                self.normalizer,
                self.objective_norm,
                self.clip,
                self.critic,
                self.kl_reward,
                self.distill,
            )
            if c is not None
        ]
        return [*one, *self.loss, *self.correction, *self.length, *self.filter, *self.stages]

    def reads(self, name: str) -> bool:
        """Whether any component of the variant reads field `name`, so the step computes it: "values"
        builds and runs the critic, "logp_ref" the reference model, "logp_old" the old forward (the
        KL in the reward reads both)."""
        return any(name in declared(c).reads for c in self.step_components())

    def coefficients(self) -> dict[str, dict[str, float]]:
        """{target: {hyperparameter: value}} as the variant states them, for the coefficients a
        controller may move and the step logs: the kl: slot's beta (its loss term and its KL in the
        reward share the target)."""
        return {KL_NAME: {"beta": self.kl.beta}}

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
    parallel: Any = (
        None  # zoo.backends.train.strategy.Parallel: the training strategy's wrappers (None: one process, plain)
    )
    processor: Any = None  # a vision-language policy's processor (images in prompts, zoo.core.media); None: text


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
    generator: Any = None  # zoo.core.kinds.Generator built from cfg.sampling.backend (None: the hf generator)
    rollouts: Any = None  # zoo.step.producer.Producer of an `async:` run (None: the synchronous step)
    teacher: Any = None  # zoo.models.teacher.Teacher of a `distill:` variant (opened in setup, closed by the trainer)
