"""The group-relative update of a `dual_encoder` policy (issue 32 §3, GRPO-TTA), built from a variant's slots.

    slots = tta_slots(load_variant("grpo_tta"))          # refuses slots a one-token, label-free update cannot use
    out = tta_loss(slots, logp, logp_old, scores, group_ids)
    out.loss.backward()

A completion is one class, so every row has one "token": the masks are [N, 1] of ones and each
component of the slot table gets exactly what it would get for N one-token completions. The
advantage (`group_mean`: r - mean of the image's group), the normalizer (`group_std`), the clip rule
(`ppo`) and the aggregation come from zoo's components, not re-derived here. With one update on
fresh candidates (epochs 1) logp_old = logp.detach(), the ratio is exactly 1 and the clip does
nothing: the update is REINFORCE with a group baseline (as RLCF, arXiv 2305.18010, which has no
ratio). The clip acts only with `updates.epochs` > 1 on the same candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.config.variant import Variant, VariantError
from zoo.core.types import AdvantageInputs, StepCounts
from zoo.step.types import Slots

_EMPTY_LISTS = ("length", "filter", "loss", "correction", "controllers")


def tta_slots(v: Variant) -> Slots:
    """The variant's built slots, or VariantError naming the variant file and the slot that a
    label-free, one-token, critic-free update cannot use: a KL (no reference model is kept), a critic,
    length shaping, a filter, extra loss terms, corrections, controllers, several minibatches, or an
    advantage / clip rule that reads more than rewards and log-probs."""
    where = v.path or v.name
    bad = []
    if v.slots.kl_spec().placement != "none":
        bad.append("'slots.kl': must be none (the adaptation keeps no reference policy)")
    if v.slots.critic is not None:
        bad.append("'slots.critic': must be null (no value model for a one-class completion)")
    bad += [f"'slots.{k}': must be [] (got {getattr(v.slots, k)})" for k in _EMPTY_LISTS if getattr(v.slots, k)]
    if v.updates.minibatches != 1:
        bad.append(f"'updates.minibatches': must be 1 (one image's group is one batch), got {v.updates.minibatches}")
    if v.distill is not None:
        bad.append("'distill': not supported by zoo tta")
    if bad:
        raise VariantError("\n".join(f"{where}: key {b}" for b in bad))
    slots = Slots.of(v)
    for slot in ("advantage", "clip"):
        decl = getattr(slots, slot).entry.decl
        if decl.reads or decl.selects:
            raise VariantError(
                f"{where}: key 'slots.{slot}': {getattr(slots, slot).name!r} reads {decl.reads or 'the step'}, "
                "which a dual_encoder rollout does not have; use e.g. group_mean / ppo"
            )
    return slots


@dataclass(frozen=True)
class TTALoss:
    """loss (scalar), advantages [N] (after the normalizer), ratio [N] (detached)."""

    loss: Tensor
    advantages: Tensor
    ratio: Tensor


def tta_advantages(slots: Slots, scores: Tensor, group_ids: Tensor) -> Tensor:
    """scores [N], group_ids [N] -> [N, 1] advantages: the variant's advantage, then its normalizer."""
    mask = torch.ones(scores.shape[0], 1, dtype=torch.bool)  # [N, 1]: one class per completion
    inp = AdvantageInputs(scores.float(), mask, group_ids, torch.zeros(scores.shape[0], 1))
    adv = slots.advantage(inp).advantages  # [N, 1]
    return slots.normalizer(adv, mask, group_ids)


def tta_loss(slots: Slots, logp: Tensor, logp_old: Tensor, scores: Tensor, group_ids: Tensor) -> TTALoss:
    """The policy loss of one update: logp [N] (with gradients), logp_old [N], scores [N] (rewards
    after the objective normaliser and weights), group_ids [N] (which image / view)."""
    mask = torch.ones(logp.shape[0], 1, dtype=torch.bool)  # [N, 1]
    adv = tta_advantages(slots, scores, group_ids)  # [N, 1]
    res = slots.clip(logp[:, None], logp_old[:, None].detach(), adv, mask)  # ClipResult, each [N, 1]
    loss = slots.aggregate(res.loss, mask, StepCounts.of(mask))
    return TTALoss(loss, adv[:, 0].detach(), res.ratio[:, 0].detach())
