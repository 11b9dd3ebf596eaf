"""Loss aggregators (kind "aggregate"): per-token loss [N, T] -> one scalar per optimizer step.

`fn(loss [N, T], mask [N, T], counts: StepCounts) -> scalar`. Every denominator comes from
`counts`, the totals of the whole optimizer step (all micro-batches and ranks), never from the
micro-batch in hand: called on one micro-batch, an aggregator returns that micro-batch's *share*,
and the shares summed over the step's micro-batches are the step's value (cases C2, C3). So the
caller sums the shares (backward on each) and never divides by the accumulation count.

Padding is selected away before summing (stats.masked_sum), so NaN/inf there never reach the value.
A step with no real token (counts of 0) gives 0, not NaN.
Sources: docs/concepts/algorithms.md §0 "Aggregators"; GRPO arXiv 2402.03300 eq. 3; DAPO arXiv 2503.14476 §3.3;
Dr. GRPO arXiv 2503.20783 §3.1 (constant normaliser).
"""

from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor

from zoo.components.stats import check_same_shape, masked_mean, masked_sum
from zoo.core.registry import register
from zoo.core.types import StepCounts


def _denominator(value: float) -> float:
    """A step total as a divisor: at least 1, so an empty step gives 0 rather than NaN."""
    return max(float(value), 1.0)


@register("aggregate", "token_mean")
def token_mean(loss: Tensor, mask: Tensor, counts: StepCounts) -> Tensor:
    """sum over the micro-batch's real tokens / counts.tokens (the step's real-token total).

    loss, mask: [N, T]; counts: the step's StepCounts. Returns a scalar (this micro-batch's share).
    Raises ValueError when loss and mask shapes differ.
    Source: DAPO arXiv 2503.14476 §3.3 (token-level policy-gradient loss)."""
    check_same_shape(loss=loss, mask=mask)
    return masked_sum(loss, mask) / _denominator(counts.tokens)


@register("aggregate", "seq_mean_token_mean")
def seq_mean_token_mean(loss: Tensor, mask: Tensor, counts: StepCounts) -> Tensor:
    """sum_i (masked token mean of row i) / counts.sequences (the step's completion total).

    loss, mask: [N, T]; counts: the step's StepCounts. Returns a scalar (this micro-batch's share);
    a row with no real token contributes 0 but still counts as a sequence.
    Raises ValueError when loss and mask shapes differ.
    Source: GRPO, DeepSeekMath arXiv 2402.03300 eq. 3 ((1/G) sum_i (1/|o_i|) sum_t)."""
    check_same_shape(loss=loss, mask=mask)
    return masked_mean(loss, mask, dim=-1).sum() / _denominator(counts.sequences)


@register("aggregate", "seq_mean_token_sum")
def seq_mean_token_sum(loss: Tensor, mask: Tensor, counts: StepCounts) -> Tensor:
    """sum_i sum_t loss_{i,t} / counts.sequences: per-sequence sums averaged over the step.

    loss, mask: [N, T]; counts: the step's StepCounts. Returns a scalar (this micro-batch's share).
    Raises ValueError when loss and mask shapes differ.
    Source: RLOO arXiv 2402.14740 (whole completion = one action); verl's "seq-mean-token-sum"."""
    check_same_shape(loss=loss, mask=mask)
    return masked_sum(loss, mask) / _denominator(counts.sequences)


def _check_norm(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    L = params["L"]
    if L is not None and (isinstance(L, bool) or not isinstance(L, (int, float)) or not L > 0):
        raise ValueError(f"L must be None (= max_new_tokens) or a number > 0, got {L!r}")


@register("aggregate", "seq_mean_token_sum_norm", check=_check_norm)
def seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, counts: StepCounts, *, L: float | None = None) -> Tensor:
    """sum_i sum_t loss_{i,t} / (counts.sequences * L), L a constant (None -> counts.max_new_tokens).

    Dr. GRPO's unbiased "const-norm": no per-sequence length in the denominator. The sum runs over
    `mask`, the policy's trained tokens (an environment's tokens in a multi-turn row are not in it),
    so L is a budget of the policy's own tokens, like `max_new_tokens`, not of the attention extent.
    loss, mask: [N, T]; counts: the step's StepCounts. Returns a scalar (this micro-batch's share).
    Raises ValueError when shapes differ or L is not None and <= 0.
    Source: Dr. GRPO arXiv 2503.20783 §3.1 (mask.sum() replaced by a constant MAX_TOKENS)."""
    _check_norm({"L": L}, {})
    check_same_shape(loss=loss, mask=mask)
    length = counts.max_new_tokens if L is None else L
    return masked_sum(loss, mask) / (_denominator(counts.sequences) * float(length))
