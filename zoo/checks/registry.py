"""The registered checks, in the order they run. A check is a small function of one stage's subject
that adds lines to a Report:

    @check("generator", "before_load")
    def generator(s: BeforeLoad, rep: Report) -> None:
        ...

Stages: `before_load` (the config alone: nothing loads; `zoo.checks.before_load`) and `after_load`
(the model's config.json and tokenizer, a meta-device model; `zoo.checks.after_load`). A check may
set fields of its subject that later checks read (the variant, the built rewards); a check whose
inputs an earlier one could not build returns at once (that one reported why)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from zoo.checks.report import Report

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
