"""Length shaping within a group (kind "length"): rewards that compare a completion's length with
the other completions for the same prompt, using `LengthRows` (group ids, per-row reward metrics)."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.core.registry import register
from zoo.core.types import LengthResult, LengthRows


def _check_metric(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not isinstance(params["metric"], str) or not params["metric"]:
        raise ValueError(
            f"metric must be the name of a per-row reward metric (e.g. accuracy), got {params['metric']!r}"
        )


@register("length", "kimi_length", check=_check_metric, needs_groups=True, reads_metric=True)
def kimi_length(
    lengths: Tensor, truncated: Tensor, max_new_tokens: int, rows: LengthRows, *, metric: str = "accuracy"
) -> LengthResult:
    """Kimi k1.5's length reward, an extra objective column: within each group,
    lam_i = 0.5 - (len_i - min_len) / (max_len - min_len); a correct completion gets lam_i, an
    incorrect one min(0, lam_i) (the shortest correct answer gets +0.5, the longest -0.5; a wrong
    answer is never rewarded for being short). A group whose lengths are all equal gets 0 (the 0/0
    case: our convention, nothing to prefer). Correct = rows.metrics[metric] == 1 (default
    `accuracy`: the reward registered with `accuracy=True`, e.g. `correctness`, gave 1.0); a row
    whose metric is NaN (unscored) gets 0 (its score is NaN through that reward already).
    Kimi also warms this reward up (off at first, then on); that schedule is not part of this
    component.

    lengths: [N] the policy's own tokens per completion (`Batch.policy_tokens`, EOS included);
    truncated: [N] bool (unused); max_new_tokens: unused; rows.group_ids [N]; rows.metrics[metric] [N]. Returns LengthResult(column [N] float,
    keep None). Raises ValueError naming the available metrics when `metric` is not among them.
    Source: Kimi k1.5 arXiv 2501.12599 §2.3.3 ("Length Penalty").
    """
    if metric not in rows.metrics:
        raise ValueError(
            f"length kimi_length: metric {metric!r} not among the step's metrics "
            f"(`accuracy` needs a correctness reward); available: {', '.join(sorted(rows.metrics)) or '(none)'}"
        )
    n = lengths.double()  # [N]
    c = rows.metrics[metric].to(n.device).double()  # [N]
    _, inv = torch.unique(rows.group_ids.to(n.device), return_inverse=True)  # [N] -> 0..P-1
    P = int(inv.max()) + 1 if inv.numel() else 0
    lo = torch.full((P,), float("inf"), dtype=n.dtype, device=n.device).scatter_reduce(0, inv, n, reduce="amin")
    hi = torch.full((P,), float("-inf"), dtype=n.dtype, device=n.device).scatter_reduce(0, inv, n, reduce="amax")
    span = (hi - lo)[inv]  # [N]
    lam = torch.where(span > 0, 0.5 - (n - lo[inv]) / span.clamp(min=1e-12), torch.zeros_like(n))  # [N]
    col = torch.where(c == 1.0, lam, torch.clamp(lam, max=0.0))
    col = torch.where(torch.isnan(c), torch.zeros_like(col), col)
    return LengthResult(column=col.to(torch.get_default_dtype()), keep=None)
