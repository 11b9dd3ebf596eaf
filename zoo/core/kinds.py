"""The slot table, written once: every component kind, its call contract, and the variant slot it fills.

The registry's kinds (`zoo.core.registry.KINDS`), the variant schema (`zoo.config.variant.Slots`,
`SLOT_KINDS`, `LIST_SLOTS`), `zoo list` and the slot table of docs/reference/components.md are derived
from `TABLE` (tests/core/test_kinds.py and tests/docs/test_docs.py check that they agree).

Each row is one kind. `contract` is a `typing.Protocol` with the call signature every component
of the kind has (positional data arguments; hyperparameters are keyword-only and not part of it).
`slot` is the variant slot the kind fills (None: a registry kind that is not a slot, e.g.
`kl_estimator`, used through the `kl:` slot, and `reward`, listed in the run file's `rewards:`);
`many` marks a list slot; `optional` a slot that may be `null`; `reads` the fields the kind's
contract passes (each component also declares what it reads: zoo.core.declarations). The `kl` row is a
setting slot, not a registry kind (`registered=False`): its schema is `zoo.config.variant.KLSpec`.

Shapes: N completions, T completion tokens, K reward objectives (docs/reference/components.md, the notation under the slot table).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

if TYPE_CHECKING:  # only for the annotations: zoo.components imports the registry, which imports this
    from torch import Tensor, nn

    from zoo.core.batch import Batch
    from zoo.core.generator_types import Continuation, SamplingParams
    from zoo.core.types import (
        AdvantageInputs,
        AdvantageResult,
        ClipResult,
        LengthResult,
        LengthRows,
        StepCounts,
        TermInputs,
        TermResult,
    )


class ObjectiveNormFn(Protocol):
    def __call__(self, objectives: Tensor, group_ids: Tensor, /) -> Tensor:
        """objectives [N, K], group_ids [N] -> normalised objectives [N, K] (NaN rows stay NaN)."""


class AdvantageFn(Protocol):
    def __call__(self, inp: AdvantageInputs, /) -> AdvantageResult:
        """AdvantageInputs -> AdvantageResult(advantages [N, T], returns [N, T] or None)."""


class NormalizerFn(Protocol):
    def __call__(self, adv: Tensor, mask: Tensor, group_ids: Tensor, /) -> Tensor:
        """adv [N, T], mask [N, T], group_ids [N] -> normalised advantages [N, T]."""


class ClipFn(Protocol):
    def __call__(self, logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, /) -> ClipResult:
        """logp, logp_old, adv, mask, all [N, T] -> ClipResult(loss, clip_low, clip_high, ratio), all [N, T].
        A rule registered with `selects=True` (clip_cov, kl_cov) also takes keyword `step`: the
        StepView of the optimizer step (zoo/step/selection.py; not a hyperparameter), or None; a
        rule declaring rollout fields in `reads=` (dppo: logp_rollout) takes each as a keyword."""


class AggregateFn(Protocol):
    def __call__(self, loss: Tensor, mask: Tensor, counts: StepCounts, /) -> Tensor:
        """loss [N, T], mask [N, T], totals of the whole optimizer step -> scalar (sums over micro-batches)."""


class KLEstimatorFn(Protocol):
    def __call__(self, logp: Tensor, ref_logp: Tensor, /) -> Tensor:
        """logp [N, T], ref_logp [N, T] -> per-token KL estimate [N, T]."""


class LengthFn(Protocol):
    def __call__(self, lengths: Tensor, truncated: Tensor, max_new_tokens: int, rows: LengthRows, /) -> LengthResult:
        """lengths [N], truncated [N] bool, the generation budget, rows (group ids, per-row reward
        metrics) -> LengthResult(column [N] | None, keep [N] | None)."""


class FilterFn(Protocol):
    def __call__(self, metrics: Mapping[str, Tensor], group_ids: Tensor, /) -> Tensor:
        """per-row metrics {name: [N]}, group_ids [N] -> keep [N] bool (whole groups)."""


class CriticFn(Protocol):
    def __call__(
        self, values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, counts: StepCounts, /
    ) -> Tensor:
        """values, old_values, returns, mask, all [N, T], step totals -> scalar value loss (times its coef)."""


class LossTermFn(Protocol):
    def __call__(self, inp: TermInputs, /) -> TermResult:
        """TermInputs (logp, logp_old, advantages, mask [n, T], step totals, + declared fields) ->
        TermResult(loss [n, T], token_stats); aggregated with the variant's rule unless it declares its own."""


class CorrectionFn(Protocol):
    def __call__(self, inp: TermInputs, /) -> Tensor:
        """TermInputs -> a detached per-token weight [n, T] multiplying the clip rule's per-token loss."""


class Controller(Protocol):
    """A stateful coefficient: read the step's metrics, set a loss term's hyperparameter."""

    def coefficients(self) -> dict[str, dict[str, float]]:
        """{term name: {hyperparameter: value}} for the next step (e.g. {"kl": {"beta": 0.05}})."""

    def update(self, metrics: Mapping[str, float], tokens: float, rows: float, /) -> None:
        """After the step: its metrics and this rank's loss-mask tokens and rows (a collective)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict, /) -> None: ...


class ControllerFn(Protocol):
    def __call__(self) -> Controller:
        """A fresh controller (its hyperparameters are the spec's): one per run, checkpointed."""


class RewardFn(Protocol):
    def __call__(self, completions: list[str], rows: list[dict], /) -> list[float | None]:
        """N completion texts and their dataset rows -> N scores (None: could not score)."""


class Generator(Protocol):
    """A sampler: the policy's rollouts and the log-probs of the distribution it drew from."""

    def generate(self, prompts: Sequence, group_size: int, sampling: SamplingParams, /) -> Batch:
        """N = len(prompts) x G completions -> Batch (prompt-major) with `logp_rollout [N, T]`: the
        log-softmax of the distribution each token was drawn from, after temperature, top-k, top-p
        (transformers' order), 0 off the loss mask. A generator that samples with images in prompts
        (the `hf` one) also has a `processor` attribute and takes each prompt's images as a fourth
        positional argument, filling `Batch.media` (docs/guides/images.md)."""

    def continue_(
        self, prefix_ids: Sequence[Sequence[int]], sampling: SamplingParams, stop: Sequence[str], /
    ) -> Continuation:
        """Extend each row from its own prefix until a stop string (may span tokens), EOS or
        `sampling.max_new_tokens` -> Continuation(ids, mask, logp_rollout [n, T], truncated [n], ...)."""

    def sync(self, policy: nn.Module, /) -> None:
        """After optimizer steps that changed the policy's weights: make the sampler use them (a no-op
        where it samples with the policy module itself)."""


class TeacherFn(Protocol):
    def __call__(self, policy: nn.Module, teacher: object, device: object, /) -> object:
        """The run's policy, the run file's `teacher:` block (zoo.config.distill.TeacherConfig) and the
        device -> an open teacher (zoo.models.teacher.Teacher: `forward()`, `after_update`, `close`)."""


class StageFn(Protocol):
    def __call__(self, batch: Batch, /) -> Mapping[str, Tensor]:
        """The step's Batch at the stage's place (`after=`) -> the fields it declares in `writes=`, each
        with N rows (`[N]` or `[N, T]`), put into `Batch.extras` (zoo/core/stages.py)."""


class GeneratorFn(Protocol):
    def __call__(self, policy: nn.Module, tokenizer: object, /) -> Generator:
        """The policy module and its tokenizer -> a Generator (built once per run from `sampling.backend`)."""


class EnvFn(Protocol):
    def __call__(self) -> object:
        """A fresh environment (`zoo.envs.base.Env`: `reset(row, seed)`, `step(state, assistant_text)`,
        `stop`), built from `task.env` (hyperparameters only)."""


# The weight-transfer contract (not a registry kind): a sampler with its own copy of the weights (the
# `vllm` generator; rollout workers in other processes later) receives the policy as a version.
# zoo/backends/generate/weights.py builds versions (`policy_version`, `named_weights`) and re-exports both.
@dataclass(frozen=True)
class PolicyVersion:
    """One version of the policy's weights.

    version: increases by one per sync (0: the weights the sampler starts from).
    tensors: (name, tensor) pairs in the base model's parameter names (transformers' names, no PEFT
        wrapper names); every tensor detached, plain CPU or device tensors (no module is shared, so the
        receiver may run in another process). For LoRA the adapted layers are merged (`W + scaling * B @ A`).
    """

    version: int
    tensors: tuple[tuple[str, Tensor], ...]


class WeightReceiver(Protocol):
    """What a sampler with its own weights implements: `accept` loads a version and returns the version
    it now samples with. Cached prompt states of older versions must not be reused afterwards."""

    def accept(self, policy: PolicyVersion, /) -> int: ...


@dataclass(frozen=True)
class Kind:
    """One row of the slot table (see the module doc)."""

    kind: str
    contract: type | None
    slot: str | None
    reads: tuple[str, ...]
    many: bool = False
    optional: bool = False
    registered: bool = True
    note: str = ""

    def place(self) -> str:
        """Where a user writes it: `clip`, `length (list)`, `critic (or null)`, or the note of a non-slot kind."""
        if self.slot is None:
            return self.note
        return self.slot + (" (list)" if self.many else " (or null)" if self.optional else "")


# Order matters: it is the order of `zoo list`, `zoo show` and the registry's kinds.
TABLE: tuple[Kind, ...] = (
    Kind("advantage", AdvantageFn, "advantage", ("scores", "mask", "group_ids", "kl_reward", "values")),
    Kind("normalizer", NormalizerFn, "normalizer", ("advantages", "mask", "group_ids")),
    Kind("objective_norm", ObjectiveNormFn, "objective_norm", ("objectives", "group_ids")),
    Kind("clip", ClipFn, "clip", ("logp", "logp_old", "advantages", "mask")),
    Kind("aggregate", AggregateFn, "aggregate", ("loss", "mask", "counts")),
    Kind("kl", None, "kl", (), registered=False, note="a setting: none or {placement, estimator, beta, adaptive}"),
    Kind("kl_estimator", KLEstimatorFn, None, ("logp", "logp_ref"), note="not a slot: kl.estimator"),
    Kind("length", LengthFn, "length", ("lengths", "truncated", "max_new_tokens", "group_ids", "metrics"), many=True),
    Kind("filter", FilterFn, "filter", ("metrics", "group_ids"), many=True),
    Kind("critic", CriticFn, "critic", ("values", "old_values", "returns", "mask", "counts"), optional=True),
    Kind("loss", LossTermFn, "loss", ("logp", "logp_old", "advantages", "mask", "counts"), many=True),
    Kind("correction", CorrectionFn, "correction", ("logp", "logp_old", "advantages", "mask", "counts"), many=True),
    Kind("controller", ControllerFn, "controllers", ("metrics",), many=True),
    Kind("reward", RewardFn, None, ("completions", "rows"), note="not a slot: the run file's rewards"),
    Kind(
        "generator",
        GeneratorFn,
        None,
        ("prompts", "group_size", "sampling"),
        note="not a slot: the run file's sampling.backend",
    ),
    Kind("env", EnvFn, None, ("row", "seed", "assistant_text"), note="not a slot: the run file's task.env"),
    Kind("stage", StageFn, None, ("batch",), note="not a slot: runs when a component reads a field it writes"),
    Kind("teacher", TeacherFn, None, ("policy", "teacher", "device"), note="not a slot: the variant's distill.teacher"),
)


def registry_kinds() -> tuple[str, ...]:
    """Kinds the registry holds components of, in table order."""
    return tuple(k.kind for k in TABLE if k.registered)


def slots() -> tuple[str, ...]:
    """Every variant slot, in table order (what a variant must state or inherit)."""
    return tuple(k.slot for k in TABLE if k.slot is not None)


def slot_kinds() -> dict[str, str]:
    """slot -> registry kind, for the slots filled by registered components (not `kl`)."""
    return {k.slot: k.kind for k in TABLE if k.slot is not None and k.registered}


def list_slots() -> tuple[str, ...]:
    """Slots that hold a list of components."""
    return tuple(k.slot for k in TABLE if k.slot is not None and k.many)


def setting_slots() -> tuple[str, ...]:
    """Slots that hold a setting rather than a component (`kl`)."""
    return tuple(k.slot for k in TABLE if k.slot is not None and not k.registered)


def by_kind(kind: str) -> Kind:
    """The row of `kind`. Raises KeyError naming the known kinds."""
    for k in TABLE:
        if k.kind == kind:
            return k
    raise KeyError(f"unknown kind {kind!r}; kinds: {', '.join(k.kind for k in TABLE)}")


def positional_arity(contract: type) -> int:
    """How many positional data arguments the contract's `__call__` takes (without `self`)."""
    params: Sequence[inspect.Parameter] = list(inspect.signature(contract.__call__).parameters.values())[1:]
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
