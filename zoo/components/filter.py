"""Sampling filters (kind "filter"): `fn(metrics: Mapping[str, Tensor [N]], group_ids [N]) -> keep [N] bool`.

Whole groups (all completions of one prompt) are kept or dropped together; the result does not
depend on row order. Source: DAPO arXiv 2503.14476 §3.2 (dynamic sampling).
"""
from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor

from zoo.components.stats import group_stats
from zoo.registry import register


def _check_metric(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not isinstance(params["metric"], str) or not params["metric"]:
        raise ValueError(f"metric must be a non-empty metric name, got {params['metric']!r}")


@register("filter", "dynamic_sampling", check=_check_metric, needs_groups=True)
def dynamic_sampling(metrics: Mapping[str, Tensor], group_ids: Tensor, *, metric: str = "accuracy") -> Tensor:
    """Keep the groups whose mean `metric` is strictly between 0 and 1 (DAPO: 0 < #correct < G);
    groups that all succeeded or all failed have zero advantage and are dropped.

    metrics: name -> [N] per-completion values in [0, 1] (NaN = not computed, left out of the mean;
    a group with no valid value has mean 0 and is dropped); group_ids: [N] ints, any order and values.
    Returns keep [N] bool, constant within each group.
    Raises ValueError naming the available metrics when `metric` is not in `metrics`, or when the
    metric and group_ids are not both [N].
    Source: DAPO arXiv 2503.14476 §3.2 and Alg. 1 (over-sample, then keep groups with mixed outcomes)."""
    if metric not in metrics:
        raise ValueError(f"filter dynamic_sampling: metric {metric!r} not among the step's metrics; "
                         f"available: {', '.join(sorted(metrics)) or '(none)'}")
    values = metrics[metric]
    mean, _, _ = group_stats(values.to(group_ids.device).double(), group_ids)  # [N], each row's group mean
    return (mean > 0) & (mean < 1)
