"""Advantages over a multi-turn trajectory's trained tokens only: the environment's tokens sit between
the policy's turns (loss mask 0) and are not actions, so an estimator that runs along the tokens
(GAE's bootstrap V_{t+1}, reward-to-go, discounting) must step from the last token of one turn to
the first token of the next. `packed_advantage` packs each row's trained tokens to the left, runs
the estimator there and puts the results back; a batch whose loss masks are prefixes (every
single-turn rollout) is passed through untouched. Shapes: N rows, T completion tokens."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch
from torch import Tensor

from zoo.core.types import AdvantageInputs, AdvantageResult


def has_holes(mask: Tensor) -> bool:
    """Whether some row of mask [N, T] has a trained token after an untrained one."""
    m = mask.bool()
    return bool((~m[:, :-1] & m[:, 1:]).any()) if m.shape[1] > 1 else False


def packed_advantage(estimator: Callable[[AdvantageInputs], AdvantageResult], inp: AdvantageInputs) -> AdvantageResult:
    """`estimator(inp)` computed over each row's trained tokens packed to the left (their order kept):
    mask, kl_reward, values, token_rewards and the [N, T] extras (per-token fields, as `Batch` treats
    them: e.g. `otb_energy`, so `otb` packs a multi-turn row as verl's TIR-OTB,
    `compute_multi_turn_optimal_token_baseline_advantage`, does) are gathered, advantages
    and returns [N, T] scattered back (0 off the mask). Without holes in inp.mask: exactly `estimator(inp)`."""
    if not has_holes(inp.mask):
        return estimator(inp)
    mask = inp.mask.bool()
    order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # [N, T] trained positions first

    def gather(x: Tensor | None) -> Tensor | None:
        return None if x is None else x.gather(1, order.to(x.device))

    def scatter(x: Tensor | None) -> Tensor | None:
        if x is None:
            return None
        out = torch.empty_like(x).scatter_(1, order.to(x.device), x)
        return torch.where(mask.to(x.device), out, torch.zeros_like(out))

    res = estimator(
        replace(
            inp,
            mask=gather(inp.mask),
            kl_reward=gather(inp.kl_reward),
            values=gather(inp.values),
            token_rewards=gather(inp.token_rewards),
            extras={k: gather(v) if tuple(v.shape) == tuple(mask.shape) else v for k, v in inp.extras.items()},
        )
    )
    return AdvantageResult(scatter(res.advantages), scatter(res.returns))
