"""What a generator takes and returns besides `zoo.core.batch.Batch`: the sampling settings of one call and
the result of `continue_` (the `generator` kind's contract is `zoo.core.kinds.Generator`).

Shapes: n rows, T new tokens (right-padded)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    """The sampling controls of one generator call.

    max_new_tokens: the token budget per row (>= 1).
    temperature, top_k, top_p: the warping, applied in transformers' order (temperature, then top-k,
        then top-p); top_k 0 and top_p 1 are off. `logp_rollout` is the log-softmax of the warped
        distribution at the drawn token.
    do_sample: False = greedy (argmax); logp_rollout is then the log-softmax of logits / temperature.
    min_new_tokens: stop ids are suppressed before a row has this many tokens (benchmarks).
    micro_batch: rows per underlying call (None: all rows at once).
    logits_processors: extra `transformers.LogitsProcessor`s applied to the raw logits before the
        warping (e.g. the `noisy` generator's noise); a generator that cannot apply them raises
        ValueError.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    do_sample: bool = True
    min_new_tokens: int = 0
    micro_batch: int | None = None
    logits_processors: tuple[Any, ...] = field(default=(), compare=False)


@dataclass
class Continuation:
    """What `continue_` returns: each row's new tokens after its own prefix.

    ids:           [n, T] long, new tokens, right-padded with the pad id after the row ended
    mask:          [n, T] bool, the row's new tokens up to and including the first EOS or the token that
                   completed a stop string
    logp_rollout:  [n, T] float, the sampler's log-probs of the drawn tokens (0 off the mask)
    truncated:     [n] bool, the row reached the token budget without EOS or stop string
    lengths:       [n] long, mask.sum(1)
    stopped_by:    per row, the stop string that ended it (None: EOS or the budget)
    texts:         per row, the decoded new tokens under the mask (special tokens skipped; a stop
                   string that ended the row is included)
    """

    ids: Tensor
    mask: Tensor
    logp_rollout: Tensor
    truncated: Tensor
    lengths: Tensor
    stopped_by: list[str | None]
    texts: list[str]
