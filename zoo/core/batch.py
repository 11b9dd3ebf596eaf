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
    """One rollout batch and everything computed from it: the one record between the stages of a step
    (docs/concepts/engine.md, "One record: `Batch`"). The generator fills the first block, the step the second.

    Filled by the generator (`zoo.backends.generate.hf.generate_rollout`):
      prompt_ids:      [N, P] long, left-padded prompt tokens (pad id where prompt_mask is 0)
      prompt_mask:     [N, P] bool, real prompt tokens
      completion_ids:  [N, T] long, right-padded completion tokens (pad id after the first EOS)
      loss_mask:       [N, T] bool, the policy's own tokens that are trained: the completion up to and
                       including the first EOS (C6); length shaping (`overlong_filter`) clears rows
      group_ids:       [N] long, the group (prompt) each completion answers; prompt-major after
                       generation (rows p*G .. p*G+G-1 answer prompt p of the call)
      truncated:       [N] bool, reached max_new_tokens without EOS
      lengths:         [N] long, the attention extent of the completion: its columns that are context,
                       up to and including the first EOS (`completion_attention`); in a multi-turn
                       trajectory it also covers the environment's tokens
      policy_tokens:   [N] long, how many of those tokens the policy itself sampled (the loss mask's
                       count at generation, before length shaping clears rows): what length shaping,
                       the completion-length metrics and the throughput count. Single-turn it equals
                       `lengths` (the default when not given); an environment's tokens are attended
                       but never the policy's (docs/concepts/engine.md "Lengths and masks")
      texts, rows:     the decoded completions (to the first EOS, excluded) and their dataset rows
      logp_rollout:    [N, T] float, the sampler's log-probs of the drawn tokens: of the distribution it
                       drew from, after its warping (zoo.backends.generate.warping); 0 off the mask
    Filled by the step:
      objectives:      [N, K] float, raw reward columns (NaN = could not be computed)
      scores:          [N] float, objective-normalised weighted sum the advantage uses
      logp_old:        [N, T] float, log-probs at rollout time (None: taken from the first update)
      logp_ref:        [N, T] float, reference-model log-probs (None without KL)
      values:          [N, T] float, critic values at rollout time (None without critic)
      kl_reward:       [N, T] float, the KL placed in the reward, -beta * k(logp_old, logp_ref) on real
                       tokens (zeros when the KL is not in the reward); rewards never include it
      token_rewards:   [N, T] float, rewards per token: the outcome score on the last real token, 0
                       elsewhere (process rewards would fill more); never the KL (that is kl_reward)
      advantages:      [N, T] float; returns: [N, T] float value targets (critic only)
      extras:          name -> tensor with N rows, for fields a plugin adds ([N, T] ones are trimmed
                       and padded like the completion)
      media:           N `zoo.core.media.RowMedia` (a list, selected and concatenated with the rows):
                       each row's processor outputs besides its ids (pixel_values, image_grid_thw,
                       mm_token_type_ids ...) for an image task; None for text (docs/guides/images.md)

    The loss mask says which tokens are trained, the attention mask which are context. Convention for
    tokens after the first EOS (padding): attention 0 and loss 0 (`attention_mask`). Attention is
    causal, so no real token's log-prob depends on them either way (tested in tests/core/test_batch.py).
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    loss_mask: Tensor
    group_ids: Tensor
    truncated: Tensor
    lengths: Tensor
    policy_tokens: Tensor | None = None  # [N]; None -> lengths (single-turn)
    texts: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    objectives: Tensor | None = None
    scores: Tensor | None = None
    logp_old: Tensor | None = None
    logp_rollout: Tensor | None = None  # [N, T] the sampler's log-probs of the drawn tokens (0 off the mask)
    logp_ref: Tensor | None = None
    values: Tensor | None = None
    kl_reward: Tensor | None = None
    token_rewards: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    extras: dict[str, Tensor] = field(default_factory=dict)
    media: list[Any] | None = None  # N zoo.core.media.RowMedia of an image task; None: text only

    def __post_init__(self) -> None:
        if self.policy_tokens is None:  # single-turn: every attended completion token is the policy's
            self.policy_tokens = self.lengths.clone()

    @property
    def size(self) -> int:
        """N, the number of completions."""
        return int(self.completion_ids.shape[0])

    def input_ids(self) -> Tensor:
        """[N, P + T] prompt then completion."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    def completion_attention(self) -> Tensor:
        """[N, T] bool: completion tokens that are context, up to and including the first EOS."""
        T = self.completion_ids.shape[1]
        return torch.arange(T, device=self.lengths.device)[None, :] < self.lengths[:, None]

    def attention_mask(self) -> Tensor:
        """[N, P + T] long: the prompt's real tokens, then the completion up to its first EOS."""
        return torch.cat(
            [self.prompt_mask.long(), self.completion_attention().long().to(self.prompt_mask.device)], dim=1
        )

    def select(self, idx: Tensor | list[int]) -> "Batch":
        """The rows `idx` (1-D indices, or an [N] bool mask), every tensor and list field alike."""
        idx_t = torch.as_tensor(idx)
        if idx_t.dtype == torch.bool:
            idx_t = idx_t.nonzero().squeeze(1)
        idx_t = idx_t.long()
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                out[f.name] = v[idx_t.to(v.device)]
            elif f.name == "extras":
                out[f.name] = {k: x[idx_t.to(x.device)] for k, x in v.items()}
            elif isinstance(v, list):  # texts/rows/media: length N, or empty when not kept (hand-built batches)
                out[f.name] = [v[i] for i in idx_t.tolist()] if v else []
            else:
                out[f.name] = v
        return Batch(**out)

    def trimmed(self) -> "Batch":
        """Drop prompt columns that are padding in every row and completion columns past the longest
        loss mask (less padding in the training forward; values are unchanged, C10)."""
        keep_p = self.prompt_mask.any(0).nonzero()
        p0 = int(keep_p[0]) if keep_p.numel() else self.prompt_mask.shape[1]
        t1 = int(self.loss_mask.any(0).nonzero().max()) + 1 if self.loss_mask.any() else 1
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor) and f.name in ("prompt_ids", "prompt_mask"):
                v = v[:, p0:]
            elif isinstance(v, Tensor) and _per_token(f.name, v):
                v = v[:, :t1]
            elif f.name == "extras":
                v = {k: (x[:, :t1] if _per_token(k, x) else x) for k, x in v.items()}
            out[f.name] = v
        return Batch(**out)

    def to(self, device: torch.device | str) -> "Batch":
        """A copy with every tensor on `device`."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = (
                v.to(device)
                if isinstance(v, Tensor)
                else ({k: x.to(device) for k, x in v.items()} if f.name == "extras" else v)
            )
        return Batch(**out)


def _per_token(name: str, v: Tensor) -> bool:
    """A [N, T] field that follows the completion's columns (objectives [N, K] does not)."""
    return v.dim() == 2 and name != "objectives"


def concat(batches: list[Batch], pad_id: int) -> Batch:
    """Rows of several batches in one: prompts re-padded on the left, completions on the right.
    Group ids must already be distinct across the batches. Raises ValueError when a field (or an
    extra) is set in some batches and not others."""
    if len(batches) == 1:
        return batches[0]
    P = max(b.prompt_ids.shape[1] for b in batches)
    T = max(b.completion_ids.shape[1] for b in batches)
    out: dict[str, Any] = {}
    for f in fields(Batch):
        vals = [getattr(b, f.name) for b in batches]
        if f.name == "extras":
            keys = set(vals[0])
            if any(set(v) != keys for v in vals):
                raise ValueError("cannot concatenate batches: their extras differ")
            out[f.name] = {k: _cat(k, [v[k] for v in vals], T, 0) for k in keys}
        elif all(v is None for v in vals):
            out[f.name] = None
        elif isinstance(vals[0], list):
            out[f.name] = [x for v in vals for x in v]
        elif any(v is None for v in vals):
            raise ValueError(f"cannot concatenate batches: {f.name} is set in some and not others")
        elif f.name in ("prompt_ids", "prompt_mask"):
            fill = pad_id if f.name == "prompt_ids" else 0
            out[f.name] = torch.cat([_pad(v, P, fill, left=True) for v in vals])
        else:
            out[f.name] = _cat(f.name, vals, T, pad_id if f.name == "completion_ids" else 0)
    return Batch(**out)


def _cat(name: str, vals: list[Tensor], T: int, fill: Any) -> Tensor:
    if _per_token(name, vals[0]):
        return torch.cat([_pad(v, T, fill, left=False) for v in vals])
    return torch.cat(vals)


def _pad(x: Tensor, width: int, fill: Any, left: bool) -> Tensor:
    """[N, w] -> [N, width] padded with `fill` on one side."""
    extra = width - x.shape[1]
    if extra <= 0:
        return x
    pad = torch.full((x.shape[0], extra), fill, dtype=x.dtype, device=x.device)
    return torch.cat([pad, x] if left else [x, pad], dim=1)


__all__ = ["Batch", "concat", "replace"]
