"""The update stage: `epochs` x `minibatches` optimizer steps over one rollout batch, each
accumulated over micro-batches. Per token the loss is the clip rule's term (+ the KL to the
reference when it is placed in the loss, - the entropy bonus), aggregated over the WHOLE optimizer
step: every aggregation divides by the step's totals over all micro-batches and ranks
(`step_counts`), and gradients are summed over ranks, so the result equals one pass over the whole
step on one process (cases C2, C3). Shapes: n rows of a micro-batch, T completion tokens."""
from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from typing import Any

import torch
from torch import Tensor

from zoo import dist
from zoo.batch import Batch
from zoo.components import StepCounts
from zoo.components.kl import masked_kl
from zoo.components.stats import masked_sum, sanitize
from zoo.step.forwards import critic_values, forward_logp, micro_rows
from zoo.step.types import Models, Slots, StepSettings


def step_counts(mask: Tensor, max_new_tokens: int) -> StepCounts:
    """Totals of one optimizer step over every rank (C2/C3 across data-parallel processes).
    mask: [n, T] bool, this rank's loss mask of the optimizer step's rows."""
    t = dist.all_reduce_sum(torch.tensor([float(mask.sum()), float(mask.shape[0])]))
    return StepCounts(tokens=float(t[0]), sequences=float(t[1]), max_new_tokens=max_new_tokens)


@dataclass
class TokenTally:
    """Sums over the real tokens of every micro-batch of one rollout's updates, on this rank; the
    step's token-mean metrics are these sums over all ranks divided by `tokens`."""

    tokens: float = 0.0
    clip_low: float = 0.0   # tokens the clip rule flagged at 1 - eps_low (its own flags)
    clip_high: float = 0.0  # ... at 1 + eps_high
    ratio: float = 0.0      # importance ratio pi / pi_old
    approx_kl: float = 0.0  # k2 = 0.5 (log r)^2, approx KL(old || new)
    entropy: float = 0.0
    kl_ref: float = 0.0     # k(logp, logp_ref) with the KL in the loss
    ratio_max: float = 0.0  # a max, not a sum: over all ranks it is the max of the ranks' maxima

    def add(self, res: Any, logp: Tensor, old: Tensor, ent: Tensor, mask: Tensor) -> None:
        """One micro-batch: res = the clip rule's ClipResult; logp, old, ent, mask: [n, T]."""
        lr_ = logp.detach() - old
        self.tokens += float(mask.sum())
        self.clip_low += float(masked_sum(res.clip_low.float(), mask))
        self.clip_high += float(masked_sum(res.clip_high.float(), mask))
        self.ratio += float(masked_sum(res.ratio, mask))
        self.approx_kl += float(masked_sum(0.5 * lr_**2, mask))
        self.entropy += float(masked_sum(ent.detach().float(), mask))
        self.ratio_max = max(self.ratio_max, float(sanitize(res.ratio, mask, float("-inf")).max()) if mask.any() else 0.0)

    def metrics(self, kl_in_loss: bool) -> dict[str, float]:
        """Token means over every rank (a collective). NaN when no token was updated: undefined, not 0."""
        sums = dist.all_reduce_sum(torch.tensor(astuple(self)[:-1], dtype=torch.float64)).tolist()
        tot = dict(zip([f.name for f in fields(self)][:-1], sums))
        rmax = max(dist.all_gather_object(self.ratio_max))
        n = tot["tokens"] if tot["tokens"] > 0 else float("nan")
        out = {
            "clip/low_frac": tot["clip_low"] / n, "clip/high_frac": tot["clip_high"] / n,
            "ratio/mean": tot["ratio"] / n, "ratio/max": rmax if tot["tokens"] > 0 else float("nan"),
            "ratio/approx_kl": tot["approx_kl"] / n, "entropy": tot["entropy"] / n,
        }
        if kl_in_loss:
            out["kl/ref"] = tot["kl_ref"] / n
        return out


def update(
    batch: Batch,
    models: Models,
    slots: Slots,
    s: StepSettings,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    beta: float,
    critic_optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """`epochs` x `minibatches` optimizer steps over one rollout batch (rows shuffled by `generator`
    into minibatches when there are several). Returns the metrics averaged over optimizer steps
    (loss/*, optim/grad_norm, critic/*) and token means over all of them (clip/*, ratio/*, entropy)."""
    per_step: dict[str, list[float]] = {}
    tally = TokenTally()
    n = batch.size
    for _ in range(s.epochs):
        perm = torch.randperm(n, generator=generator) if s.minibatches > 1 else torch.arange(n)
        for mb_rows in perm.tensor_split(s.minibatches):
            # in row order: a group's completions sit side by side, so micro-batches share their prompt
            # forward (rollout.token_logprobs); the order within an optimizer step changes no sum
            sub = batch.select(mb_rows.sort().values)
            counts = step_counts(sub.loss_mask, s.max_new_tokens)
            if counts.tokens == 0:  # nothing to learn from on any rank (e.g. every group filtered out)
                continue
            losses = _accumulate(sub, models, slots, s, counts, beta, tally, optimizer, critic_optimizer)
            # each rank summed its share of the step's losses: the step's value is the sum over ranks
            pol, kl, val = dist.all_reduce_sum(torch.tensor(losses, dtype=torch.float64)).tolist()
            gn = optimizer_step(models.policy, optimizer, s.max_grad_norm)
            if scheduler is not None:
                scheduler.step()
            per_step.setdefault("optim/grad_norm", []).append(gn)
            per_step.setdefault("loss/policy", []).append(pol)
            per_step.setdefault("loss/kl", []).append(kl)
            if critic_optimizer is not None and models.critic is not None:
                per_step.setdefault("critic/grad_norm", []).append(
                    optimizer_step(models.critic, critic_optimizer, s.max_grad_norm))
                per_step.setdefault("loss/value", []).append(val)
    out = {k: sum(v) / len(v) for k, v in per_step.items()}
    out.update(tally.metrics(kl_in_loss=slots.kl.placement == "loss"))
    out["optim/steps"] = float(s.epochs * s.minibatches)
    return out


def _accumulate(sub: Batch, models: Models, slots: Slots, s: StepSettings, counts: StepCounts, beta: float,
                tally: TokenTally, optimizer: torch.optim.Optimizer,
                critic_optimizer: torch.optim.Optimizer | None) -> tuple[float, float, float]:
    """Forward and backward of every micro-batch of one optimizer step (gradients accumulate).
    Returns this rank's (policy loss, KL-in-loss part, value loss) of the step."""
    optimizer.zero_grad(set_to_none=True)
    if critic_optimizer is not None:
        critic_optimizer.zero_grad(set_to_none=True)
    pol_loss = kl_loss = v_loss = 0.0
    for r in micro_rows(sub, s.micro_batch):
        mb = sub.select(r).trimmed()
        m = mb.loss_mask  # [n, T]
        logp, ent = forward_logp(models.policy, mb, s, with_entropy=True)  # [n, T] each
        old = mb.logp_old if mb.logp_old is not None else logp.detach()
        res = slots.clip(logp, old, mb.advantages, m)
        per_token = res.loss  # [n, T]
        if slots.kl.placement == "loss" and mb.logp_ref is not None:
            k = masked_kl(slots.kl_estimator, logp, mb.logp_ref, m)  # [n, T], padding 0
            kl_loss += float(slots.aggregate(sanitize(beta * k.detach(), m), m, counts))
            per_token = per_token + sanitize(beta * k, m)
            tally.kl_ref += float(masked_sum(k.detach(), m))
        if s.entropy_coef:
            per_token = per_token - s.entropy_coef * sanitize(ent, m)
        loss = slots.aggregate(per_token, m, counts)
        loss.backward()
        pol_loss += float(loss.detach())
        tally.add(res, logp, old, ent, m)
        if models.critic is not None and slots.critic is not None and mb.returns is not None:
            vl = slots.critic(critic_values(models.critic, mb, s), mb.values, mb.returns, m, counts)
            vl.backward()
            v_loss += float(vl.detach())
    return pol_loss, kl_loss, v_loss


def optimizer_step(model: torch.nn.Module, opt: torch.optim.Optimizer, max_norm: float | None) -> float:
    """Sum gradients over ranks, clip to `max_norm` (None: no clipping), step, free the gradients.
    Returns the gradient norm before clipping."""
    params = [p for p in model.parameters() if p.requires_grad]
    dist.sum_gradients(params)
    if max_norm is not None:
        gn = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    else:
        gn = float(torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
    opt.step()
    opt.zero_grad(set_to_none=True)  # free the gradients now: generation and forwards run without them
    return gn
