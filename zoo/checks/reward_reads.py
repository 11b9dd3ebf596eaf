"""Checks, before any model loads, that what a variant's components read from the rewards will exist:
the per-row metric a sampling filter or a length reward names (`filter: dynamic_sampling` on
`accuracy`, `length: kimi_length` on `accuracy`: declared `reads_metric`), and the reward column a loss
term reads (`nll_positive`'s `column`: declared `reads_column`). `zoo validate` and `zoo run` call
`check_reward_reads` (zoo.checks); before it, the `rewards` check resolves the run's rewards and gold
rewards. Without these, such mistakes surface only at the first step, after the models loaded."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad
from zoo.components.filter import step_metric_kinds
from zoo.core.declarations import of as declared
from zoo.core.registry import Component, build


def check_reward_reads(
    slots: Any, rewards: Sequence[Component], context: Mapping[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """(errors, warnings) for `slots` (a variant's slots: `filter`, `length`, `loss` lists of specs)
    against the run's built reward components, in the order of the run file's `rewards:`.

    - A filter or length component declaring `reads_metric` names a metric
      (`zoo.step.scoring.per_row_metrics`): an error when no reward will produce it (`accuracy`
      needs a reward registered with `accuracy=True`, e.g. `correctness`); for a filter, a warning
      when the metric is continuous (an equality filter then keeps nearly every group); for a length
      reward, a warning when it is not a 0/1 score (kimi_length reads 1.0 as correct).
    - A loss term declaring `reads_column` reads reward column `column` (0-based): an error when the
      run has no such column, a warning when that reward does not judge correctness.
    Raises ComponentError for a spec that does not build (check_variant reports that first)."""
    kinds = step_metric_kinds(rewards)
    errors: list[str] = []
    warnings: list[str] = []
    for slot in ("filter", "length"):
        for comp in (build(slot, s, context) for s in getattr(slots, slot, None) or []):
            if not comp.decl.reads_metric:
                continue
            metric = comp.resolved()["metric"]
            if metric not in kinds:
                why = "it needs a `correctness` reward" if metric == "accuracy" else "no reward produces it"
                errors.append(
                    f"{slot} {comp.name}: metric {metric!r} will not exist ({why}); the step's metrics "
                    f"are {', '.join(sorted(kinds))}"
                )
            elif slot == "filter" and metric == "reward" and _shaping(slots, context):
                warnings.append(
                    f"filter {comp.name}: metric 'reward' is the score after length shaping "
                    f"({', '.join(_shaping(slots, context))} adds a column to it), so groups whose answers are all "
                    "right or all wrong but differ in length are kept with a shaping-only advantage; DAPO "
                    "filters on accuracy (metric: accuracy, with a correctness reward)"
                )
            elif slot == "filter" and kinds[metric] is False:
                warnings.append(
                    f"filter {comp.name}: metric {metric!r} is continuous, so its values rarely tie "
                    "within a group and the filter keeps nearly every group (it drops only groups whose "
                    "values are all equal); DAPO filters on accuracy"
                )
            elif slot == "length" and metric != "accuracy" and kinds[metric] is not True:
                warnings.append(
                    f"length {comp.name}: metric {metric!r} is not a 0/1 correctness score; a row counts "
                    "as correct when it is 1.0, so a continuous metric makes nearly every row incorrect "
                    "(Kimi k1.5 uses accuracy)"
                )
    for comp in (build("loss", s, context) for s in getattr(slots, "loss", None) or []):
        if comp.decl.reads_column:
            col, n = comp.resolved()["column"], len(rewards)
            if col >= n:
                errors.append(
                    f"loss {comp.name}: column {col} does not exist; the run has {n} reward column(s), "
                    f"numbered 0 .. {n - 1} in the order of the run file's `rewards:`"
                )
            elif not declared(rewards[col]).accuracy:
                judges = [i for i, r in enumerate(rewards) if declared(r).accuracy]
                hint = f"set column: {judges[0]} ({rewards[judges[0]].name})" if judges else "add a correctness reward"
                warnings.append(
                    f"loss {comp.name}: column {col} is {rewards[col].name!r}, not a correctness reward, "
                    f"yet a row counts as correct when its score is >= the threshold: {hint}"
                )
    return errors, warnings


@check("rewards", "before_load")
def rewards(s: BeforeLoad, rep: Report) -> None:
    """`rewards:` and `gold:` resolve (registered names, parameters, plugin modules; a reward model
    directory holds a checkpoint); the built rewards go to `s.rewards`."""
    from zoo.rewards.compute import resolve_rewards

    try:
        s.rewards = [c for c, _ in resolve_rewards(s.cfg.rewards, s.cfg.plugins)]
    except ValueError as e:
        rep.errors.append(f"rewards: {_unprefixed(e)}")
    if s.cfg.gold:
        try:
            resolve_rewards(s.cfg.gold, s.cfg.plugins)
        except ValueError as e:
            rep.errors.append(f"gold: {_unprefixed(e)}")


def _unprefixed(e: ValueError) -> str:
    """`resolve_rewards`' message without its own `rewards: ` lead: the check names the key (`rewards`
    or `gold`) once."""
    return str(e).removeprefix("rewards: ")


@check("reward_reads", "before_load")
def reward_reads(s: BeforeLoad, rep: Report) -> None:
    """What the variant's filters, length rewards and loss terms read from the rewards exists
    (`check_reward_reads`); skipped when the variant or the rewards did not build."""
    if s.components is None or s.rewards is None:
        return
    errors, warnings = check_reward_reads(s.variant.slots, s.rewards, s.context())
    rep.errors += errors
    rep.warnings += warnings


def _shaping(slots: Any, context: Mapping[str, Any] | None) -> list[str]:
    """The variant's length components that add a column to the score (all but `overlong_filter`,
    which only drops rows)."""
    return [
        build("length", sp, context).name
        for sp in getattr(slots, "length", None) or []
        if build("length", sp, context).name != "overlong_filter"
    ]
