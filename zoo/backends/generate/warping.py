"""The sampler's own log-probs (`logp_rollout`): the warping processors in transformers' order, and a
recorder placed after them that reads the very scores `generate` samples from (no extra forward).

transformers applies its own warpers after any user-supplied processor, so the generator turns its
warpers off in the GenerationConfig and passes them itself: [user processors (e.g. noise),
TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, recorder]. The classes and their order are
transformers' own (`GenerationMixin._get_logits_processor`), so the distribution is the one HF samples
with the same temperature / top-k / top-p.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def warpers(temperature: float, top_k: int, top_p: float, do_sample: bool) -> list:
    """transformers' warpers for these settings, in its order; greedy keeps only the temperature (the
    argmax does not change, logp_rollout becomes log-softmax(logits / temperature))."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out: list = []
    if temperature != 1.0:
        out.append(TemperatureLogitsWarper(float(temperature)))
    if do_sample and top_k:
        out.append(TopKLogitsWarper(top_k=int(top_k), min_tokens_to_keep=1))
    if do_sample and top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=float(top_p), min_tokens_to_keep=1))
    return out


class RolloutLogprobs:
    """A LogitsProcessor (placed last) that records log-softmax(scores) at each drawn token.

    At decode step k it sees the processed scores [n, V] of token k; token k itself is only known at
    step k + 1 (the last column of `input_ids`), so it keeps one step's log-softmax [n, V] and gathers
    it then; `finish(last_tokens [n])` gathers the final step. `values()` -> [n, steps] float32.
    Memory: one [n, V] tensor, not the [steps, n, V] of `output_scores`.
    """

    def __init__(self) -> None:
        self._prev: Tensor | None = None
        self._cols: list[Tensor] = []

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if self._prev is not None:
            self._cols.append(self._gather(input_ids[:, -1]))
        self._prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _gather(self, tokens: Tensor) -> Tensor:
        assert self._prev is not None
        return self._prev.gather(1, tokens[:, None].to(self._prev.device)).squeeze(1)

    def finish(self, last_tokens: Tensor) -> None:
        """Gather the last step at `last_tokens` [n] (the final column of the output)."""
        if self._prev is not None:
            self._cols.append(self._gather(last_tokens))
            self._prev = None

    def values(self) -> Tensor:
        """[n, steps] float32 log-probs of the drawn tokens (raw: the caller zeroes them off the mask)."""
        return torch.stack(self._cols, dim=1) if self._cols else torch.zeros(0, 0)


class SeededDraw:
    """A LogitsProcessor (placed after the recorder) that draws each row's next token from
    softmax(scores) with its own `torch.Generator` and returns scores that are 0 at that token and -inf
    elsewhere, so `generate` in greedy mode takes it: the draw reads and moves only `generator`, never
    torch's global RNG (a rollout worker in a thread of the trainer's process, zoo/backends/generate/
    rollout_worker.py). The same distribution as transformers' `multinomial(softmax(scores))`."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        probs = torch.softmax(scores.float(), dim=-1)  # [n, V]
        tokens = torch.multinomial(probs, 1, generator=self.generator)  # [n, 1]
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, tokens.to(out.device), 0.0)


def processor_list(
    extra: Sequence,
    temperature: float,
    top_k: int,
    top_p: float,
    do_sample: bool,
    recorder: RolloutLogprobs,
    generator: torch.Generator | None = None,
):
    """LogitsProcessorList [extra..., warpers..., recorder] for `generate(logits_processor=...)`; with
    `generator` (and do_sample) [..., recorder, SeededDraw(generator)] for a greedy `generate`."""
    from transformers import LogitsProcessorList

    draw = [SeededDraw(generator)] if generator is not None and do_sample else []
    return LogitsProcessorList([*extra, *warpers(temperature, top_k, top_p, do_sample), recorder, *draw])
