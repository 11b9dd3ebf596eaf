"""The record passed between the stages of one training step.

N completions, P prompt tokens (left-padded), T completion tokens (right-padded), K objectives.
Rows are prompt-major: the G completions of one prompt share a group id.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor


@dataclass
class Batch:
    """One rollout batch and everything computed from it.

    Filled by the rollout:
      prompt_ids:      [N, P] long, left-padded prompt tokens (pad id where prompt_mask is 0)
      prompt_mask:     [N, P] bool
      completion_ids:  [N, T] long, right-padded completion tokens
      mask:            [N, T] bool, completion tokens in the loss (to the first EOS inclusive;
                       overlong_filter clears rows of truncated completions)
      group_ids:       [N] long, prompt index the completion answers
      truncated:       [N] bool, reached max_new_tokens without EOS
      lengths:         [N] long, completion tokens up to and including EOS
      texts, rows:     the decoded completions and their dataset rows (length N)
    Filled by the step:
      objectives:      [N, K] float, raw reward columns (NaN = could not be computed)
      scores:          [N] float, objective-normalised weighted sum the advantage uses
      logp_old:        [N, T] float, log-probs at rollout time (None: taken from the first update)
      logp_ref:        [N, T] float, reference-model log-probs (None without KL)
      values:          [N, T] float, critic values at rollout time (None without critic)
      advantages:      [N, T] float; returns: [N, T] float value targets (critic only)
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    mask: Tensor
    group_ids: Tensor
    truncated: Tensor
    lengths: Tensor
    texts: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    objectives: Tensor | None = None
    scores: Tensor | None = None
    logp_old: Tensor | None = None
    logp_ref: Tensor | None = None
    values: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None

    @property
    def size(self) -> int:
        return int(self.completion_ids.shape[0])

    def input_ids(self) -> Tensor:
        """[N, P + T] prompt then completion."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    def attention_mask(self) -> Tensor:
        """[N, P + T]: prompt padding is 0; completion tokens after EOS stay 1 (they are never scored
        as context for earlier tokens, since attention is causal)."""
        ones = torch.ones_like(self.completion_ids, dtype=self.prompt_mask.dtype)
        return torch.cat([self.prompt_mask, ones], dim=1)

    def select(self, idx: Tensor | list[int]) -> "Batch":
        """The rows `idx` (1-D indices), every tensor and list field alike."""
        idx_t = torch.as_tensor(idx, dtype=torch.long)
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                out[f.name] = v[idx_t.to(v.device)]
            elif isinstance(v, list):  # texts/rows: length N, or empty when not kept (hand-built batches)
                out[f.name] = [v[i] for i in idx_t.tolist()] if v else []
            else:
                out[f.name] = v
        return Batch(**out)

    def trimmed(self) -> "Batch":
        """Drop prompt columns that are padding in every row and completion columns past the longest
        mask (less padding in the training forward; values are unchanged, C10)."""
        keep_p = self.prompt_mask.any(0).nonzero()
        p0 = int(keep_p[0]) if keep_p.numel() else self.prompt_mask.shape[1]
        t1 = int(self.mask.any(0).nonzero().max()) + 1 if self.mask.any() else 1
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor) and f.name in ("prompt_ids", "prompt_mask"):
                v = v[:, p0:]
            elif isinstance(v, Tensor) and v.dim() == 2 and f.name not in ("objectives",):
                v = v[:, :t1]
            out[f.name] = v
        return Batch(**out)


def concat(batches: list[Batch], pad_id: int) -> Batch:
    """Rows of several batches in one: prompts re-padded on the left, completions on the right.
    Group ids must already be distinct across the batches."""
    if len(batches) == 1:
        return batches[0]
    P = max(b.prompt_ids.shape[1] for b in batches)
    T = max(b.completion_ids.shape[1] for b in batches)
    out: dict[str, Any] = {}
    for f in fields(Batch):
        vals = [getattr(b, f.name) for b in batches]
        if all(v is None for v in vals):
            out[f.name] = None
        elif isinstance(vals[0], list):
            out[f.name] = [x for v in vals for x in v]
        elif any(v is None for v in vals):
            raise ValueError(f"cannot concatenate batches: {f.name} is set in some and not others")
        elif f.name in ("prompt_ids", "prompt_mask"):
            fill = pad_id if f.name == "prompt_ids" else 0
            out[f.name] = torch.cat([_pad(v, P, fill, left=True) for v in vals])
        elif vals[0].dim() == 2 and f.name != "objectives":
            fill = pad_id if f.name == "completion_ids" else 0
            out[f.name] = torch.cat([_pad(v, T, fill, left=False) for v in vals])
        else:
            out[f.name] = torch.cat(vals)
    return Batch(**out)


def _pad(x: Tensor, width: int, fill: Any, left: bool) -> Tensor:
    """[N, w] -> [N, width] padded with `fill` on one side."""
    extra = width - x.shape[1]
    if extra <= 0:
        return x
    pad = torch.full((x.shape[0], extra), fill, dtype=x.dtype, device=x.device)
    return torch.cat([pad, x] if left else [x, pad], dim=1)


__all__ = ["Batch", "concat", "replace"]
