"""KL in the reward, the advantage estimator and the advantage normalizer: three stages of the step.
Shapes: N completions, T completion tokens."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

import torch
from torch import Tensor

from zoo.components.kl import kl_reward as kl_reward_fn
from zoo.components.kl import masked_kl
from zoo.components.stats import masked_mean, masked_std, sanitize
from zoo.core import dist
from zoo.core.batch import Batch
from zoo.core.types import AdvantageInputs
from zoo.envs.packing import packed_advantage
from zoo.step.types import Slots, params


def kl_reward(batch: Batch, slots: Slots, coefs: Mapping[str, Mapping[str, float]]) -> tuple[Batch, dict[str, float]]:
    """KL placement "reward": `batch.kl_reward` [N, T] = -beta * k(logp_old, logp_ref) on real tokens
    (Ziegler et al. arXiv:1909.08593 eq. 2; InstructGPT arXiv:2203.02155 eq. 2), all zeros otherwise.
    beta: the kl: slot's, or what a controller set for its target now (coefs: {target: {hyperparameter:
    value}}). Logs kl/ref (token mean of k) when the KL is in the reward."""
    mask = batch.loss_mask
    klr = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)  # [N, T]
    metrics: dict[str, float] = {}
    stage = slots.kl_reward
    if stage is not None and batch.logp_old is not None and batch.logp_ref is not None:
        k = masked_kl(stage.estimator, batch.logp_old, batch.logp_ref, mask)  # [N, T]
        klr = kl_reward_fn(k, mask, {**stage.resolved(), **params(stage, coefs)}["beta"])
        metrics["kl/ref"] = float(masked_mean(k, mask))
    return replace(batch, kl_reward=klr), metrics


def advantage(batch: Batch, slots: Slots) -> Batch:
    """The advantage estimator -> `batch.advantages` [N, T] (not yet normalised; NaN on rows whose
    score is NaN) and `batch.returns` [N, T] (value targets, critic only). Fills
    `batch.token_rewards` with the outcome rewards when no stage set them."""
    tr = (
        batch.token_rewards if batch.token_rewards is not None else outcome_token_rewards(batch.scores, batch.loss_mask)
    )
    inp = AdvantageInputs(
        scores=batch.scores,
        mask=batch.loss_mask,
        group_ids=batch.group_ids,
        kl_reward=batch.kl_reward,
        values=batch.values,
        token_rewards=tr,
        objectives=batch.objectives,
        extras=batch.extras,
    )
    res = packed_advantage(slots.advantage, inp)  # multi-turn: over the policy's tokens only (zoo/envs/packing.py)
    return replace(batch, advantages=res.advantages, returns=res.returns, token_rewards=tr)


def outcome_token_rewards(scores: Tensor, mask: Tensor) -> Tensor:
    """[N, T] float: each completion's score [N] on its last real token (mask [N, T]), 0 elsewhere
    (NaN scores stay NaN there); rows without a real token are all 0."""
    T = mask.shape[1]
    last = (mask.long() * torch.arange(1, T + 1, device=mask.device)).argmax(1)  # [N] index of the last real token
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    has = mask.any(1)
    rows = torch.arange(mask.shape[0], device=mask.device)[has]
    out[rows, last[has]] = scores[has].float().to(out.device)
    return out


def normalize(batch: Batch, slots: Slots) -> tuple[Batch, dict[str, float]]:
    """The normalizer over the step's global batch (`normalize_global`); rows whose score is NaN get
    advantage 0 after normalisation (no policy gradient), never NaN elsewhere. Logs adv/mean,
    adv/std (unbiased), adv/max, adv/min over real tokens."""
    mask = batch.loss_mask
    adv = normalize_global(slots.normalizer, batch.advantages, mask, batch.group_ids)  # [N, T]
    adv = torch.where(torch.isnan(adv) | ~mask, torch.zeros_like(adv), adv)
    metrics = {
        "adv/mean": float(masked_mean(adv, mask)),
        "adv/std": float(masked_std(adv, mask)),  # unbiased, as every std in zoo
        "adv/max": float(sanitize(adv, mask, float("-inf")).max()) if mask.any() else 0.0,
        "adv/min": float(sanitize(adv, mask, float("inf")).min()) if mask.any() else 0.0,
    }
    return replace(batch, advantages=adv), metrics


def normalize_global(normalizer: Callable[..., Tensor], adv: Tensor, mask: Tensor, group_ids: Tensor) -> Tensor:
    """`normalizer(adv, mask, group_ids)` over the step's global batch when data parallel.

    adv: [N, T] float; mask: [N, T] bool; group_ids: [N] (a group never spans ranks). With one
    process this is `normalizer(...)`. Under data parallelism every rank gathers all ranks' rows
    (padded to the longest T, group ids made distinct per rank), normalises the whole batch and keeps
    its own rows, so batch statistics (`batch_std`, REINFORCE++'s global whitening) are the global
    batch's, not one rank's share (REINFORCE++ arXiv:2501.03262 §3: normalisation over the global
    batch). A collective: a rank without rows calls it with `empty_rows()`.
    Returns [N, T] on adv's device; raises what the normalizer raises (ValueError on bad shapes)."""
    if not dist.is_distributed():
        return normalizer(adv, mask, group_ids)
    parts = dist.all_gather_object((adv.detach().cpu(), mask.cpu(), group_ids.cpu()))
    T = max(int(a.shape[1]) for a, _, _ in parts)
    advs, masks, gids, offset = [], [], [], 0
    for a, m, g in parts:
        advs.append(torch.nn.functional.pad(a, (0, T - a.shape[1])))  # [n_r, T]
        masks.append(torch.nn.functional.pad(m, (0, T - m.shape[1]), value=False))  # [n_r, T]
        g = g.long()
        gids.append(g - (g.min() if g.numel() else 0) + offset)  # [n_r], disjoint from other ranks'
        offset = int(gids[-1].max()) + 1 if g.numel() else offset
    if sum(int(a.shape[0]) for a in advs) == 0:
        return adv
    out = normalizer(torch.cat(advs), torch.cat(masks), torch.cat(gids))  # [N_global, T]
    start = sum(int(a.shape[0]) for a, _, _ in parts[: dist.rank()])
    return out[start : start + adv.shape[0], : adv.shape[1]].to(adv.device)


def empty_rows(device: torch.device | str = "cpu") -> tuple[Tensor, Tensor, Tensor]:
    """(adv [0, 0], mask [0, 0], group_ids [0]): what a rank without rows passes to the collective
    `normalize_global` so that the ranks with rows are not left waiting."""
    return (
        torch.zeros(0, 0, device=device),
        torch.zeros(0, 0, dtype=torch.bool, device=device),
        torch.zeros(0, dtype=torch.long, device=device),
    )
