"""The update stage: `epochs` x `minibatches` optimizer steps over one rollout batch, each
accumulated over micro-batches. Per token the loss is the clip rule's term times the corrections,
plus the loss terms (the KL to the reference when it is placed in the loss, the entropy bonus, ...),
aggregated over the WHOLE optimizer step: every aggregation divides by the step's totals over all micro-batches and ranks
(`step_counts`), and gradients are summed over ranks (the loss is scaled by the world size: DDP and
FSDP2 average; zoo/backends/train/strategy.py), so the result equals one pass over the whole
step on one process (cases C2, C3). Shapes: n rows of a micro-batch, T completion tokens."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import Tensor

from zoo.backends.train import strategy
from zoo.components.stats import masked_sum, sanitize
from zoo.core import dist, guards, registry
from zoo.core.batch import Batch
from zoo.core.declarations import of as declared
from zoo.core.types import StepCounts, TermInputs
from zoo.step import selection
from zoo.step.distill_vocab import POLICY_FIELD as POLICY_VOCAB
from zoo.step.distill_vocab import vocab_forward
from zoo.step.forwards import critic_values, first_order, forward_logp, idle_inputs, micro_rows, reuses_old
from zoo.step.hooks import NO_HOOKS, Hooks
from zoo.step.mismatch import RolloutTally, rollout_weight
from zoo.step.types import Models, Slots, StepSettings, params


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
    clip_low: float = 0.0  # tokens the clip rule flagged at 1 - eps_low (its own flags)
    clip_high: float = 0.0  # ... at 1 + eps_high
    ratio: float = 0.0  # importance ratio pi / pi_old
    approx_kl: float = 0.0  # k2 = 0.5 (log r)^2, approx KL(old || new)
    entropy: float = 0.0
    ratio_max: float = 0.0  # a max, not a sum: over all ranks it is the max of the ranks' maxima
    stats: dict[str, float] = field(default_factory=dict)  # the loss terms' declared token stats
    rollout: RolloutTally = field(default_factory=RolloutTally)  # rollout/* (zoo/step/mismatch.py)

    @staticmethod
    def of(slots: Slots) -> "TokenTally":
        """A tally with a zero for every token stat the variant's loss terms declare (`stats=`), so
        every rank reduces the same keys, also a rank without rows."""
        comps = (*slots.loss, slots.clip)  # a clip rule may declare token stats too (clip_cov: clip/selected_frac)
        return TokenTally(stats={k: 0.0 for t in comps for k in declared(t).stats})

    def add(self, res: Any, logp: Tensor, old: Tensor, ent: Tensor, mask: Tensor) -> None:
        """One micro-batch: res = the clip rule's ClipResult; logp, old, ent, mask: [n, T]."""
        lr_ = logp.detach() - old
        self.tokens += float(mask.sum())
        self.clip_low += float(masked_sum(res.clip_low.float(), mask))
        self.clip_high += float(masked_sum(res.clip_high.float(), mask))
        self.ratio += float(masked_sum(res.ratio, mask))
        self.approx_kl += float(masked_sum(0.5 * lr_**2, mask))
        self.entropy += float(masked_sum(ent.detach().float(), mask))
        self.ratio_max = max(
            self.ratio_max, float(sanitize(res.ratio, mask, float("-inf")).max()) if mask.any() else 0.0
        )
        self.add_stats("clip", getattr(res, "token_stats", {}), mask)  # e.g. clip_cov's clip/selected_frac

    def add_stats(self, term: str, token_stats: Mapping[str, Tensor], mask: Tensor) -> None:
        """A loss term's token stats [n, T] summed over real tokens. Raises ValueError for a stat the
        term did not declare (ranks must reduce the same keys)."""
        for k, v in token_stats.items():
            if k not in self.stats:
                raise ValueError(
                    f"loss term {term!r} returned token stat {k!r} it did not declare: register it with stats=({k!r},)"
                )
            self.stats[k] += float(masked_sum(v.detach().float(), mask))

    def metrics(self) -> dict[str, float]:
        """Token means over every rank (a collective). NaN when no token was updated: undefined, not 0."""
        names = ["tokens", "clip_low", "clip_high", "ratio", "approx_kl", "entropy"]
        keys = sorted(self.stats)
        vals = [getattr(self, n) for n in names] + [self.stats[k] for k in keys]
        sums = dist.all_reduce_sum(torch.tensor(vals, dtype=torch.float64)).tolist()
        tot = dict(zip(names + keys, sums))
        rmax = max(dist.all_gather_object(self.ratio_max))
        n = tot["tokens"] if tot["tokens"] > 0 else float("nan")
        out = {
            "clip/low_frac": tot["clip_low"] / n,
            "clip/high_frac": tot["clip_high"] / n,
            "ratio/mean": tot["ratio"] / n,
            "ratio/max": rmax if tot["tokens"] > 0 else float("nan"),
            "ratio/approx_kl": tot["approx_kl"] / n,
            "entropy": tot["entropy"] / n,
        }
        out.update({k: tot[k] / n for k in keys})
        out.update(self.rollout.metrics())
        return out


def update(
    batch: Batch,
    models: Models,
    slots: Slots,
    s: StepSettings,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    coefs: Mapping[str, Mapping[str, float]] | None = None,
    critic_optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
    hooks: Hooks = NO_HOOKS,
    train_policy: bool = True,
    order: Tensor | None = None,
) -> dict[str, float]:
    """`epochs` x `minibatches` optimizer steps over one rollout batch (rows shuffled by `generator`
    into minibatches when there are several).

    Per micro-batch the loss is aggregate(clip_term * prod(corrections) + sum of the loss terms that
    use the variant's aggregation) + sum of the terms with their own aggregation, every aggregation
    over the whole optimizer step. coefs: {term name: {hyperparameter: value}} from the controllers
    (e.g. {"kl": {"beta": 0.05}}), passed to the terms of that name. Returns the metrics averaged
    over optimizer steps (loss/policy: the step's loss; loss/<term>: each term's part; optim/grad_norm;
    critic/*) and token means over all of them (clip/*, ratio/*, entropy, the terms' token stats).

    An optimizer step whose loss (loss/policy, loss/<term>, loss/value) or gradient norm
    (optim/grad_norm, critic/grad_norm) is not finite on any rank is skipped on every rank: weights
    and optimizer state unchanged, gradients zeroed, the LR schedule still advanced. `optim/updates`
    and `optim/skipped` count applied and skipped optimizer steps. `hooks` sees each training
    forward and the critic's share ("critic" phase: its forward, loss and backward).

    train_policy False (value pretraining, `critic_warmup`): the policy's gradients are dropped, its
    weights, optimizer state and LR schedule left as they are; only the critic steps. The policy's
    losses are still computed and logged (they are the frozen policy's on-policy values).

    order: epoch 0's row order, drawn before the rollout forwards (`forwards.first_order`; None: drawn
    here from `generator`). With it and `forwards.reuses_old`, the first optimizer step's old
    log-probs are its training forward's, detached (no optimizer step has changed the policy yet),
    whatever the batch holds for those rows (`rollout_forwards(order=order)` computed none)."""
    per_step: dict[str, list[float]] = {}
    applied = skipped = 0  # optimizer steps applied / skipped for a non-finite loss or gradient norm
    tally = TokenTally.of(slots)
    with_critic = critic_optimizer is not None and models.critic is not None
    reuse = order is not None and reuses_old(slots, s)
    for sub in _optimizer_steps(batch, s, generator, order, reuse):
        counts = step_counts(sub.loss_mask, s.max_new_tokens)
        if counts.tokens == 0:  # nothing to learn from on any rank (e.g. every group filtered out)
            continue
        losses = _accumulate(sub, models, slots, s, counts, coefs or {}, tally, optimizer, critic_optimizer, hooks)
        step_m = _step_metrics(losses, models, with_critic)
        if _apply(step_m, models, optimizer, critic_optimizer if with_critic else None, s, train_policy):
            applied += 1
        else:
            skipped += 1
        if scheduler is not None and train_policy:  # a skipped step still uses its slot (as with AMP)
            guards.quiet_scheduler_step(scheduler)
        for k, v in step_m.items():
            per_step.setdefault(k, []).append(v)
    out = {k: sum(v) / len(v) for k, v in per_step.items()}  # includes skipped steps: a non-finite value shows
    out["optim/updates"] = float(applied)
    out["optim/skipped"] = float(skipped)
    out.update(tally.metrics())
    out["optim/steps"] = float(s.epochs * s.minibatches)
    return out


def _optimizer_steps(
    batch: Batch, s: StepSettings, generator: torch.Generator | None, order: Tensor | None, reuse: bool
) -> Iterator[Batch]:
    """The rows of each optimizer step, epoch by epoch: `minibatches` parts of a shuffled order
    (epoch 0's: `order` when given), each in row order. A generator: each epoch's order is drawn
    when that epoch begins, after the previous epoch's optimizer steps."""
    for epoch in range(s.epochs):
        perm = order if epoch == 0 and order is not None else first_order(batch.size, s, generator)  # [N]
        for i, mb_rows in enumerate(perm.tensor_split(s.minibatches)):
            # in row order: a group's completions sit side by side, so micro-batches share their prompt
            # forward (zoo.step.logprobs.token_logprobs); the order within an optimizer step changes no sum
            sub = batch.select(mb_rows.sort().values)
            if reuse and epoch == 0 and i == 0:  # on-policy: pi_old is the training forward's pi, detached
                sub = replace(sub, logp_old=None)
            yield sub


def _step_metrics(losses: dict[str, float], models: Models, with_critic: bool) -> dict[str, float]:
    """One optimizer step's losses summed over ranks (each rank summed its share: the step's value is
    the sum over ranks) and the gradient norms (a collective)."""
    if not with_critic:
        losses.pop("loss/value")
    names = sorted(losses)
    summed = dist.all_reduce_sum(torch.tensor([losses[k] for k in names], dtype=torch.float64)).tolist()
    step_m = dict(zip(names, summed))
    step_m["optim/grad_norm"] = summed_grad_norm(models.policy)
    if with_critic:
        step_m["critic/grad_norm"] = summed_grad_norm(models.critic)
    return step_m


def _apply(
    step_m: dict[str, float],
    models: Models,
    optimizer: torch.optim.Optimizer,
    critic_optimizer: torch.optim.Optimizer | None,
    s: StepSettings,
    train_policy: bool,
) -> bool:
    """Apply one optimizer step: the policy's (its gradients dropped in value pretraining) and the
    critic's (critic_optimizer None: no critic). A loss or gradient norm in `step_m` that is not finite
    on some rank skips the step on every rank (gradients zeroed, weights and optimizer state kept).
    Returns whether the step was applied."""
    if guards.any_rank_nonfinite(step_m.values()):  # skip on every rank: weights, optimizer state kept
        models.policy.zero_grad(set_to_none=True)
        if critic_optimizer is not None:
            models.critic.zero_grad(set_to_none=True)
        return False
    if train_policy:
        optimizer_step(models.policy, optimizer, s.max_grad_norm, step_m["optim/grad_norm"])
    else:  # value pretraining: the policy stays as it is
        models.policy.zero_grad(set_to_none=True)
    if critic_optimizer is not None:
        optimizer_step(models.critic, critic_optimizer, s.max_grad_norm, step_m["critic/grad_norm"])
    return True


def _accumulate(
    sub: Batch,
    models: Models,
    slots: Slots,
    s: StepSettings,
    counts: StepCounts,
    coefs: Mapping[str, Mapping[str, float]],
    tally: TokenTally,
    optimizer: torch.optim.Optimizer,
    critic_optimizer: torch.optim.Optimizer | None,
    hooks: Hooks = NO_HOOKS,
) -> dict[str, float]:
    """Forward and backward of every micro-batch of one optimizer step (gradients accumulate).
    Returns this rank's parts of the step's loss: loss/policy (all of it), loss/<term> per loss term,
    loss/value (critic)."""
    optimizer.zero_grad(set_to_none=True)
    if critic_optimizer is not None:
        critic_optimizer.zero_grad(set_to_none=True)
    losses = {"loss/policy": 0.0, "loss/value": 0.0, **{f"loss/{t.name}": 0.0 for t in slots.loss}}
    # loss terms that declare their own aggregation (`aggregate=` in register), built once per step
    own_rule = {t.name: registry.build("aggregate", declared(t).aggregate) for t in slots.loss if declared(t).aggregate}
    fields = selection.step_fields(sub, models, slots, s)  # the step's detached view, for selections
    offset = selection.rank_offset(sub.size) if fields is not None else 0
    # ddp/fsdp: the same number of micro-batches on every rank (zero-loss ones pad), no_sync under ddp
    idle = (lambda: idle_inputs(sub)) if sub.media else None  # padding with images (zoo.core.media)
    for r in strategy.micro_batches(models.parallel, micro_rows(sub, s.micro_batch), models, idle):
        mb = sub.select(r).trimmed()
        m = mb.loss_mask  # [n, T]
        mb, logp, ent = _policy_forward(mb, models, slots, s, hooks)  # logp, ent: [n, T]
        old = mb.logp_old if mb.logp_old is not None else logp.detach()  # [n, T]
        res = slots.clip(
            logp,
            old,
            mb.advantages,
            m,  # a selecting clip rule also gets its view of the step
            **selection.clip_kwargs(fields, slots.clip, mb, r, offset, {"logp": logp, "entropy": ent}),
        )
        inp = _term_inputs(mb, logp, old, ent, counts)

        # called only within this minibatch's iteration (B023: the loop variables it reads are this minibatch's)
        def inputs(c: Any) -> TermInputs:  # a selecting component also gets its view of the step
            v = selection.view(fields, c, mb, r, offset, {"logp": logp, "entropy": ent})  # noqa: B023
            return inp if v is None else replace(inp, step=v)  # noqa: B023

        per_token = _corrected(res.loss, slots, inputs, tally, old, mb)  # [n, T]
        per_token, own = _add_loss_terms(per_token, m, slots, inputs, coefs, own_rule, counts, losses, tally)
        loss = slots.aggregate(per_token, m, counts)
        if own:
            loss = loss + sum(own)
        strategy.backward(loss, models.parallel)
        losses["loss/policy"] += float(loss.detach())
        tally.add(res, logp, old, ent, m)
        if models.critic is not None and slots.critic is not None and mb.returns is not None:
            losses["loss/value"] += _critic_backward(mb, models, slots, s, counts, hooks)
    return losses


def _policy_forward(
    mb: Batch, models: Models, slots: Slots, s: StepSettings, hooks: Hooks
) -> tuple[Batch, Tensor, Tensor]:
    """The training forward of a micro-batch -> (mb, logp [n, T], entropy [n, T]); with a
    full-vocabulary term (zoo/step/distill_vocab.py) the same forward's vocabulary view goes into
    mb.extras."""
    with hooks.forward("policy", mb):
        model = strategy.trained(models.parallel, "policy", models.policy)
        if slots.reads(POLICY_VOCAB):  # a full-vocabulary term (zoo/step/distill_vocab.py): one forward
            logp, ent, vocab = vocab_forward(model, mb, s, entropy_grad=slots.needs_grad("entropy"))
            mb = replace(mb, extras={**mb.extras, POLICY_VOCAB: vocab})
        else:
            logp, ent = forward_logp(model, mb, s, with_entropy=True, entropy_grad=slots.needs_grad("entropy"))
    return mb, logp, ent


def _term_inputs(mb: Batch, logp: Tensor, old: Tensor, ent: Tensor, counts: StepCounts) -> TermInputs:
    """What the corrections and loss terms read of a micro-batch (tensors [n, T] unless noted)."""
    return TermInputs(
        logp=logp,
        logp_old=old,
        advantages=mb.advantages,
        mask=mb.loss_mask,
        counts=counts,
        entropy=ent,
        logp_ref=mb.logp_ref,
        scores=mb.scores,  # [n]
        objectives=mb.objectives,  # [n, K]
        values=mb.values,
        token_rewards=mb.token_rewards,
        logp_rollout=mb.logp_rollout,
        extras=mb.extras,
    )


def _corrected(
    per_token: Tensor, slots: Slots, inputs: Callable[[Any], TermInputs], tally: TokenTally, old: Tensor, mb: Batch
) -> Tensor:
    """The clip rule's per-token term [n, T] times the corrections' detached per-token multipliers;
    the rollout corrections' weight (those reading logp_rollout) goes into tally.rollout."""
    w_roll = None  # the rollout corrections' weight, for rollout/*
    for corr in slots.correction:
        w = corr(inputs(corr)).detach()  # [n, T]
        per_token = per_token * w
        w_roll = rollout_weight(w_roll, corr, w)
    tally.rollout.add(old, mb.logp_rollout, w_roll, mb.loss_mask)
    return per_token


def _add_loss_terms(
    per_token: Tensor,
    m: Tensor,
    slots: Slots,
    inputs: Callable[[Any], TermInputs],
    coefs: Mapping[str, Mapping[str, float]],
    own_rule: Mapping[str, Any],
    counts: StepCounts,
    losses: dict[str, float],
    tally: TokenTally,
) -> tuple[Tensor, list[Tensor]]:
    """Each loss term of the variant: its per-token loss [n, T] added to `per_token` (aggregated with
    the variant's rule), or aggregated with its own rule into the returned list; its detached part
    into losses["loss/<term>"], its token stats into `tally`. m: [n, T] loss mask. Returns
    (per_token, own-rule losses)."""
    own = []  # terms aggregated with their own rule
    for term in slots.loss:
        tr = term(inputs(term), **params(term, coefs))
        agg = own_rule.get(term.name, slots.aggregate)
        losses[f"loss/{term.name}"] += float(agg(tr.loss.detach(), m, counts))
        tally.add_stats(term.name, tr.token_stats, m)
        if term.name in own_rule:
            own.append(agg(tr.loss, m, counts))
        else:
            per_token = per_token + tr.loss
    return per_token, own


def _critic_backward(
    mb: Batch, models: Models, slots: Slots, s: StepSettings, counts: StepCounts, hooks: Hooks
) -> float:
    """The critic's share of the update on one micro-batch: forward (values [n, T]), loss, backward.
    Returns the value loss (detached)."""
    with hooks.phase("critic"):  # the critic's share of the update: forward, loss, backward
        with hooks.forward("critic", mb):
            v = critic_values(strategy.trained(models.parallel, "critic", models.critic), mb, s)
        vl = slots.critic(v, mb.values, mb.returns, mb.loss_mask, counts)
        strategy.backward(vl, models.parallel)
    return float(vl.detach())


def summed_grad_norm(model: torch.nn.Module) -> float:
    """Total L2 norm of the trainable parameters' gradients, summed over ranks by the strategy's
    reduction (DDP's all-reduce, FSDP2's reduce-scatter: the norm of the full, sharded gradient).
    The same on every rank; NaN/inf when a gradient is not finite; 0 without gradients."""
    return strategy.grad_norm(model)


def optimizer_step(model: torch.nn.Module, opt: torch.optim.Optimizer, max_norm: float | None, norm: float) -> None:
    """Clip the (summed) gradients to `max_norm` (None: no clipping) given their total `norm`, step,
    free the gradients."""
    if max_norm is not None:
        strategy.clip(model, max_norm, norm)
    opt.step()
    opt.zero_grad(set_to_none=True)  # free the gradients now: generation and forwards run without them
