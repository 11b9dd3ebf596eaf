"""The plumbing of the checks: what a stage found (`Report`), what each stage's checks see (`BeforeLoad`,
`AfterLoad`) and the registered checks, in the order they run. A check is a small function of one
stage's subject that adds lines to a Report:

    @check("generator", "before_load")
    def generator(s: BeforeLoad, rep: Report) -> None:
        ...

Stages: `before_load` (the config alone: nothing loads; `zoo.checks.before_load`) and `after_load`
(the model's config.json and tokenizer, a meta-device model; `zoo.checks.after_load`). A check may
set fields of its subject that later checks read (the variant, the built rewards); a check whose
inputs an earlier one could not build returns at once (that one reported why)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


# ---------------------------------------------------------------- the report
@dataclass
class Report:
    """What a check stage found: errors (the run must not start), warnings (it starts, something is
    likely wrong) and notes (worth knowing), one line each naming the file and key."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def extend(self, other: "Report", prefix: str = "") -> None:
        """Append `other`'s lines, each preceded by `prefix` (e.g. "arm grpo: ")."""
        self.errors += [prefix + m for m in other.errors]
        self.warnings += [prefix + m for m in other.warnings]
        self.notes += [prefix + m for m in other.notes]


# ---------------------------------------------------------------- what each stage's checks see: the run config
# and what earlier checks built from it
@dataclass
class BeforeLoad:
    """cfg: the RunConfig; world_size / launched: the processes the run will have (`WORLD_SIZE`, or
    `zoo validate --nproc N`); origin: where the run's `set:` overrides were written (a study arm's
    `ablations.X.set`), for messages. Filled by the checks: variant (the effective variant), components
    (its built components by slot), rewards (the built reward components), stop."""

    cfg: Any
    world_size: int = 1
    launched: bool = False
    origin: str = "set"
    variant: Any = None
    components: dict[str, Any] | None = None
    rewards: list[Any] | None = None
    stop: bool = False

    def context(self) -> dict[str, Any]:
        """What a component's check reads from the run (group size and updates in use, max_new_tokens)."""
        v, b = self.variant, self.cfg.budget
        return {
            "group_size": b.group_size or v.group_size,
            "updates": b.updates or v.updates,
            "max_new_tokens": b.max_new_tokens,
        }


@dataclass
class AfterLoad:
    """cfg, variant: as in BeforeLoad; model_config: the policy's transformers config (config.json);
    tokenizer: the policy's; rows: the task's prompts (train and eval); available: bytes free on the
    run's device; model: a meta-device model built from model_config (None when it does not build)."""

    cfg: Any
    variant: Any
    model_config: Any
    tokenizer: Any
    rows: Sequence[dict[str, Any]] = ()
    available: int | None = None
    model: Any = None
    prompt_tokens: int = 0
    estimate: dict[str, int] = field(default_factory=dict)
    stop: bool = False


# ---------------------------------------------------------------- the registered checks
STAGES = ("before_load", "after_load")


@dataclass(frozen=True)
class Check:
    name: str
    stage: str
    fn: Callable[[Any, Report], None]


CHECKS: dict[str, list[Check]] = {s: [] for s in STAGES}


def check(name: str, stage: str) -> Callable[[Callable[[Any, Report], None]], Callable[[Any, Report], None]]:
    """Register `fn(subject, report)` as check `name` of `stage`. Raises ValueError for an unknown
    stage or a name already registered in it."""
    if stage not in STAGES:
        raise ValueError(f"check {name!r}: stage {stage!r} is not one of {', '.join(STAGES)}")

    def deco(fn: Callable[[Any, Report], None]) -> Callable[[Any, Report], None]:
        if any(c.name == name for c in CHECKS[stage]):
            raise ValueError(f"check {name!r} is already registered for stage {stage}")
        CHECKS[stage].append(Check(name, stage, fn))
        return fn

    return deco


def ordered(stage: str, order: Sequence[str] = ()) -> list[Check]:
    """The checks of `stage`: those named in `order` first, in that order, then the others in
    registration order (e.g. a plugin's)."""
    rank = {n: i for i, n in enumerate(order)}
    return sorted(CHECKS[stage], key=lambda c: rank.get(c.name, len(rank)))


def run_stage(stage: str, subject: Any, order: Sequence[str] = ()) -> Report:
    """Every check of `stage` on `subject` (`ordered`); a check that sets `subject.stop` ends the
    stage (e.g. plugins that do not import)."""
    rep = Report()
    done: set[str] = set()
    while True:  # re-read after each check: the `plugins` check imports modules that register more
        c = next((c for c in ordered(stage, order) if c.name not in done), None)
        if c is None:
            return rep
        done.add(c.name)
        c.fn(subject, rep)
        if getattr(subject, "stop", False):
            return rep


def names(stage: str, order: Sequence[str] = ()) -> list[str]:
    """The registered checks of `stage`, in the order they run."""
    return [c.name for c in ordered(stage, order)]
