"""Sampling filters (kind "filter"): `fn(metrics: Mapping[str, Tensor [N]], group_ids [N]) -> keep [N] bool`.

Whole groups (all completions of one prompt) are kept or dropped together; the result does not
depend on row order. Source: DAPO arXiv 2503.14476 §3.2 (dynamic sampling).

The per-row metrics a filter may name (`zoo.step.scoring.per_row_metrics`): `accuracy` (with a
reward that judges correctness, e.g. `correctness`), `reward` (the combined score) and each reward's
name. `zoo.checks.variant.check_reward_reads` checks a variant's filters against the run's
rewards before anything runs (`zoo validate`, `zoo run`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from torch import Tensor

from zoo.components.stats import group_constant
from zoo.core.declarations import of as declared
from zoo.core.registry import Component, register


def _check_metric(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not isinstance(params["metric"], str) or not params["metric"]:
        raise ValueError(f"metric must be a non-empty metric name, got {params['metric']!r}")


@register("filter", "dynamic_sampling", check=_check_metric, needs_groups=True, reads_metric=True)
def dynamic_sampling(metrics: Mapping[str, Tensor], group_ids: Tensor, *, metric: str = "accuracy") -> Tensor:
    """Keep the groups whose valid `metric` values are not all equal (DAPO: 0 < #correct < G);
    groups that all succeeded or all failed have zero advantage and are dropped.

    metrics: name -> [N] per-completion values (NaN = not computed, left out; a group with fewer
    than 2 valid values is dropped); group_ids: [N] ints, any order and values. For a 0/1 metric
    such as `accuracy` this is DAPO's 0 < mean < 1; for any other metric it drops exactly the groups
    whose values tie (zero variance: zero advantage), as verl's filter_groups (std > 0) does.
    Returns keep [N] bool, constant within each group.
    Raises ValueError naming the available metrics when `metric` is not in `metrics`, or when the
    metric and group_ids are not both [N].
    Source: DAPO arXiv 2503.14476 §3.2 and Alg. 1 (over-sample, then keep groups with mixed outcomes)."""
    if metric not in metrics:
        raise ValueError(
            f"filter dynamic_sampling: metric {metric!r} not among the step's metrics; "
            f"available: {', '.join(sorted(metrics)) or '(none)'}"
        )
    values = metrics[metric].to(group_ids.device).double()  # [N]
    return ~group_constant(values, group_ids)  # [N]


def step_metric_kinds(rewards: Sequence[Component]) -> dict[str, bool | None]:
    """The per-row metrics a step will have (`zoo.step.scoring.per_row_metrics`) -> whether each is discrete
    (True: few distinct values, ties are common; False: continuous; None: not declared).
    rewards: the run's built reward components; a reward declares `discrete=` in its registration."""
    kinds: dict[str, bool | None] = {c.name: declared(c).discrete for c in rewards}
    if any(declared(c).accuracy for c in rewards):  # a reward that judges correctness (e.g. correctness)
        kinds["accuracy"] = True
    stated = list(kinds.values())
    kinds["reward"] = True if all(k is True for k in stated) else (False if False in stated else None)
    return kinds
