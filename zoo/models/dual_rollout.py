"""The rollout of a `dual_encoder` policy: G class candidates per image, their log-probs, the entropy.

    roll = rollout(logits, group_size=3, candidates="topk")            # logits [B, C] = scale x cos
    roll.candidates [B, G] class indices; roll.logp [B, G]; roll.entropy [B]

A completion is one class, so a "sequence" is one token: log pi(c | x) = log_softmax(logits)[c] and
the entropy is over the C classes. Two ways to pick the group (GRPO-TTA's abstract says "sampling
top-K class candidates from CLIP similarity distributions", which reads either way, so both exist):

- `topk`: the K most probable classes, deterministic (RLCF arXiv 2305.18010, its classification
  code takes `torch.topk` of each view's prediction, K = 3);
- `sample`: K classes drawn without replacement from softmax(logits) (`torch.multinomial`, i.e.
  sequential draws renormalised over the classes not yet drawn; our reading of "sampling").

Both give distinct classes, so K <= C is required.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

CANDIDATE_MODES = ("topk", "sample")


@dataclass(frozen=True)
class DualRollout:
    """One rollout over B images: candidates [B, G] (class ids), logp [B, G], entropy [B]."""

    candidates: Tensor
    logp: Tensor
    entropy: Tensor


def pick_candidates(logits: Tensor, group_size: int, mode: str, generator: torch.Generator | None = None) -> Tensor:
    """[B, C] logits -> [B, G] distinct class ids (module doc). Raises ValueError naming the key."""
    if mode not in CANDIDATE_MODES:
        raise ValueError(f"key 'candidates': must be one of {', '.join(CANDIDATE_MODES)}, got {mode!r}")
    if not 1 <= group_size <= logits.shape[-1]:
        raise ValueError(f"key 'group_size': must be 1..{logits.shape[-1]} (the number of classes), got {group_size}")
    with torch.no_grad():
        if mode == "topk":
            return logits.topk(group_size, dim=-1).indices
        probs = logits.float().softmax(dim=-1)
        return torch.multinomial(probs, group_size, replacement=False, generator=generator)


def candidate_logp(logits: Tensor, candidates: Tensor) -> Tensor:
    """log pi(c | x) of each candidate: [B, C], [B, G] -> [B, G] (differentiable in logits)."""
    return logits.float().log_softmax(dim=-1).gather(-1, candidates)


def entropy(logits: Tensor) -> Tensor:
    """[B, C] -> [B]: the entropy of softmax(logits) in nats."""
    logp = logits.float().log_softmax(dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def rollout(
    logits: Tensor, group_size: int, candidates: str = "topk", generator: torch.Generator | None = None
) -> DualRollout:
    """Pick each image's group and score it under the same logits (module doc)."""
    cand = pick_candidates(logits, group_size, candidates, generator)
    return DualRollout(cand, candidate_logp(logits, cand), entropy(logits))
