"""One training step through the slots, in the order DESIGN.md fixes:

rewards -> sampling filter -> length shaping -> objective normalizer -> old/ref log-probs and values
-> KL in the reward -> advantage -> normalizer -> epochs x minibatches optimizer steps (clip rule,
KL in the loss, entropy bonus, aggregation over the whole optimizer step) -> critic update.

The engine never branches on a component's name: it calls each slot through its kind's contract
(`zoo.components`) and reads only what the component declares (`meta`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from zoo import dist, guards, registry
from zoo.batch import Batch
from zoo.components import AdvantageInputs, StepCounts
from zoo.components.kl import kl_reward as kl_reward_fn
from zoo.components.kl import masked_kl
from zoo.components.objective import combine_objectives
from zoo.components.stats import group_constant, masked_mean, masked_sum, sanitize
from zoo.rollout import position_ids_from_mask, token_logprobs
from zoo.variant import KLSpec, Variant, build_components


@dataclass
class Slots:
    """A variant's built components (what fills each slot)."""

    advantage: registry.Component
    normalizer: registry.Component
    objective_norm: registry.Component
    clip: registry.Component
    aggregate: registry.Component
    length: list[registry.Component]
    filter: list[registry.Component]
    critic: registry.Component | None
    kl: KLSpec
    kl_estimator: registry.Component | None

    @staticmethod
    def of(v: Variant, context: Mapping[str, Any] | None = None) -> "Slots":
        c = build_components(v, context)
        kl = v.slots.kl_spec()
        est = registry.build("kl_estimator", kl.estimator) if kl.placement != "none" else None
        return Slots(kl=kl, kl_estimator=est, **c)


@dataclass
class Models:
    """policy (trainable), reference (callable model or None: no KL), critic (value model or None)."""

    policy: torch.nn.Module
    tokenizer: Any
    reference: Callable[[], contextlib.AbstractContextManager] | None
    critic: torch.nn.Module | None = None


@dataclass
class StepSettings:
    temperature: float
    micro_batch: int
    max_new_tokens: int
    epochs: int
    minibatches: int
    entropy_coef: float
    autocast: str  # "none" | "bf16" | "fp16"
    max_grad_norm: float | None


def autocast(setting: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16/fp16 autocast for forward passes, or a no-op. Log-softmax stays fp32 (rollout.token_logprobs)."""
    if setting == "none":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if setting == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


# --------------------------------------------------------------------------- scoring


def score(
    batch: Batch,
    objectives: Tensor,
    names: list[str],
    weights: list[float],
    slots: Slots,
    max_new_tokens: int,
) -> tuple[Batch, dict[str, float]]:
    """Length shaping, objective normalisation and the weighted sum -> `batch.scores` [N].

    objectives: [N, K] raw reward columns (NaN where a reward could not be computed), in the order
    of `names`/`weights`. Length components add a column (weight 1) and/or clear loss-mask rows.
    Logs the reward that trains (C11): reward/total = sum_k w_k mean(R_k), and each column's mean.
    """
    cols, names, weights = [objectives], list(names), list(weights)
    mask = batch.mask
    for comp in slots.length:
        res = comp(batch.lengths, batch.truncated, max_new_tokens)
        if res.column is not None:
            cols.append(res.column.to(objectives.dtype)[:, None])  # [N, 1]
            names.append(comp.name)
            weights.append(1.0)
        if res.keep is not None:
            mask = mask & res.keep[:, None].to(mask.device)
    obj = torch.cat(cols, dim=1)  # [N, K']
    w = torch.tensor(weights, dtype=obj.dtype)
    normed = slots.objective_norm(obj, batch.group_ids)  # [N, K']
    scores = combine_objectives(normed, w)  # [N]
    metrics: dict[str, float] = {}
    for k, n in enumerate(names):
        metrics[f"reward/{n}"] = _nanmean(obj[:, k])
    metrics["reward/total"] = float(sum(weights[k] * metrics[f"reward/{n}"] for k, n in enumerate(names)))
    metrics["reward/failed"] = float(torch.isnan(obj).any(1).sum())
    constant = group_constant(combine_objectives(obj, w), batch.group_ids)  # [N]
    metrics["groups/zero_var_frac"] = _group_frac(constant, batch.group_ids)
    metrics["loss/masked_rows_frac"] = float((~mask.any(1) & batch.mask.any(1)).float().mean())
    return replace(batch, objectives=obj, scores=scores, mask=mask), metrics


def _nanmean(x: Tensor) -> float:
    ok = ~torch.isnan(x)
    return float(x[ok].mean()) if ok.any() else float("nan")


def _group_frac(flag_per_row: Tensor, group_ids: Tensor) -> float:
    """Fraction of groups whose (group-constant) flag is true."""
    uniq, first = _first_rows(group_ids)
    return float(flag_per_row[first].float().mean()) if len(uniq) else 0.0


def _first_rows(group_ids: Tensor) -> tuple[Tensor, Tensor]:
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    first = torch.full((len(uniq),), len(group_ids), dtype=torch.long).scatter_reduce(
        0, inv, torch.arange(len(group_ids)), reduce="amin"
    )
    return uniq, first


def keep_rows(metrics_per_row: Mapping[str, Tensor], group_ids: Tensor, slots: Slots) -> Tensor:
    """[N] bool: rows every sampling filter keeps (whole groups)."""
    keep = torch.ones_like(group_ids, dtype=torch.bool)
    for f in slots.filter:
        keep &= f(metrics_per_row, group_ids)
    return keep


# --------------------------------------------------------------------------- forward passes


def _forward_logp(model: torch.nn.Module, mb: Batch, s: StepSettings, with_entropy: bool = False):
    with autocast(s.autocast, mb.prompt_ids.device):
        return token_logprobs(
            model, mb.input_ids(), mb.attention_mask(), mb.completion_ids.shape[1],
            temperature=s.temperature, with_entropy=with_entropy, entropy_grad=bool(s.entropy_coef),
        )


def critic_values(critic: torch.nn.Module, mb: Batch, s: StepSettings) -> Tensor:
    """V(s_t) for each completion token t: the value head at the position that predicts token t.
    Returns [n, T] float32."""
    ids, att = mb.input_ids(), mb.attention_mask()
    P, T = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
    with autocast(s.autocast, ids.device):
        v = critic(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att))  # [n, P+T]
    return v[:, P - 1 : P - 1 + T].float()


def _micro(batch: Batch, size: int) -> list[Tensor]:
    return list(torch.arange(batch.size).split(size))


def _fill(batch: Batch, parts: list[Tensor], rows: list[Tensor]) -> Tensor:
    out = torch.zeros(batch.mask.shape, dtype=torch.float32)
    for r, p in zip(rows, parts):
        out[r, : p.shape[1]] = p.float().cpu()
    mask = batch.mask.cpu()
    return torch.where(mask, out, torch.zeros_like(out)).to(batch.mask.device)  # padding 0, as documented


@torch.no_grad()
def rollout_forwards(batch: Batch, models: Models, slots: Slots, s: StepSettings) -> Batch:
    """Old log-probs (only when a later optimizer step or KL-in-reward needs them: with one
    on-policy update they equal the training forward's, detached), reference log-probs (only with a
    KL term) and critic values (only with a critic). Each [N, T], padding 0."""
    need_old = s.epochs * s.minibatches > 1 or slots.kl.placement == "reward"
    rows = _micro(batch, s.micro_batch)
    old, ref, val = [], [], []
    for r in rows:
        mb = batch.select(r).trimmed()
        if need_old:
            old.append(_forward_logp(models.policy, mb, s)[0])
        if slots.kl.placement != "none" and models.reference is not None:
            with models.reference() as ref_model:
                ref.append(_forward_logp(ref_model, mb, s)[0])
        if models.critic is not None:
            val.append(critic_values(models.critic, mb, s))
    return replace(
        batch,
        logp_old=_fill(batch, old, rows) if old else None,
        logp_ref=_fill(batch, ref, rows) if ref else None,
        values=_fill(batch, val, rows) if val else None,
    )


# --------------------------------------------------------------------------- advantages


def compute_advantages(batch: Batch, slots: Slots, beta: float) -> tuple[Batch, dict[str, float]]:
    """KL in the reward, the advantage estimator, then the normalizer. Rows whose score is NaN get
    advantage 0 after normalisation (no policy gradient), never NaN elsewhere."""
    mask = batch.mask
    klr = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)  # [N, T]
    metrics: dict[str, float] = {}
    if slots.kl.placement == "reward" and batch.logp_old is not None and batch.logp_ref is not None:
        k = masked_kl(slots.kl_estimator, batch.logp_old, batch.logp_ref, mask)  # [N, T]
        klr = kl_reward_fn(k, mask, beta)
        metrics["kl/ref"] = float(masked_mean(k, mask))
    inp = AdvantageInputs(scores=batch.scores, mask=mask, group_ids=batch.group_ids, kl_reward=klr, values=batch.values)
    res = slots.advantage(inp)
    adv = normalize_global(slots.normalizer, res.advantages, mask, batch.group_ids)  # [N, T]
    adv = torch.where(torch.isnan(adv) | ~mask, torch.zeros_like(adv), adv)
    metrics.update({
        "adv/mean": float(masked_mean(adv, mask)),
        "adv/std": float(_masked_std(adv, mask)),
        "adv/max": float(sanitize(adv, mask, float("-inf")).max()) if mask.any() else 0.0,
        "adv/min": float(sanitize(adv, mask, float("inf")).min()) if mask.any() else 0.0,
    })
    return replace(batch, advantages=adv, returns=res.returns), metrics


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
    return (torch.zeros(0, 0, device=device), torch.zeros(0, 0, dtype=torch.bool, device=device),
            torch.zeros(0, dtype=torch.long, device=device))


def _masked_std(x: Tensor, mask: Tensor) -> Tensor:
    mu = masked_mean(x, mask)
    return masked_mean((x - mu) ** 2, mask).sqrt()


# --------------------------------------------------------------------------- updates


def step_counts(mask: Tensor, max_new_tokens: int) -> StepCounts:
    """Totals of one optimizer step over every rank (C2/C3 across data-parallel processes)."""
    t = dist.all_reduce_sum(torch.tensor([float(mask.sum()), float(mask.shape[0])]))
    return StepCounts(tokens=float(t[0]), sequences=float(t[1]), max_new_tokens=max_new_tokens)


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
    """`epochs` x `minibatches` optimizer steps over one rollout batch.

    Each optimizer step accumulates micro-batches; every aggregation divides by the step's totals
    (`step_counts`), and gradients are summed (not averaged) over ranks, so the result equals one
    pass over the whole step on one process (cases C2, C3). An optimizer step whose loss
    (loss/policy, loss/kl, loss/value) or gradient norm (optim/grad_norm, critic/grad_norm) is not
    finite on any rank is skipped on every rank: weights and optimizer state unchanged, gradients
    zeroed, the LR schedule still advanced. Returns averaged metrics, with `optim/updates` (applied)
    and `optim/skipped` (skipped) optimizer steps.
    """
    acc: dict[str, list[float]] = {}
    applied = skipped = 0  # optimizer steps applied / skipped for a non-finite loss or gradient norm
    tok_stats = torch.zeros(8, dtype=torch.float64)  # sums over real tokens, see below
    n = batch.size
    for _ in range(s.epochs):
        perm = torch.randperm(n, generator=generator) if s.minibatches > 1 else torch.arange(n)
        for mb_rows in perm.tensor_split(s.minibatches):
            # in row order: a group's completions sit side by side, so micro-batches share their prompt
            # forward (rollout.token_logprobs); the order within an optimizer step changes no sum
            sub = batch.select(mb_rows.sort().values)
            counts = step_counts(sub.mask, s.max_new_tokens)
            if counts.tokens == 0:  # nothing to learn from on any rank (e.g. every group filtered out)
                continue
            optimizer.zero_grad(set_to_none=True)
            if critic_optimizer is not None:
                critic_optimizer.zero_grad(set_to_none=True)
            pol_loss = kl_loss = v_loss = 0.0
            for r in _micro(sub, s.micro_batch):
                mb = sub.select(r).trimmed()
                logp, ent = _forward_logp(models.policy, mb, s, with_entropy=True)  # [n, T] each
                old = mb.logp_old if mb.logp_old is not None else logp.detach()
                res = slots.clip(logp, old, mb.advantages, mb.mask)
                per_token = res.loss  # [n, T]
                if slots.kl.placement == "loss" and mb.logp_ref is not None:
                    k = masked_kl(slots.kl_estimator, logp, mb.logp_ref, mb.mask)  # [n, T], padding 0
                    kl_part = slots.aggregate(sanitize(beta * k.detach(), mb.mask), mb.mask, counts)
                    per_token = per_token + sanitize(beta * k, mb.mask)
                    kl_loss += float(kl_part)
                    tok_stats[6] += float(masked_sum(k.detach(), mb.mask))
                if s.entropy_coef:
                    per_token = per_token - s.entropy_coef * sanitize(ent, mb.mask)
                loss = slots.aggregate(per_token, mb.mask, counts)
                loss.backward()
                pol_loss += float(loss.detach())
                m = mb.mask
                lr_ = logp.detach() - old
                tok_stats[0] += float(m.sum())
                tok_stats[1] += float(masked_sum(res.clip_low.float(), m))
                tok_stats[2] += float(masked_sum(res.clip_high.float(), m))
                tok_stats[3] += float(masked_sum(res.ratio, m))
                tok_stats[4] += float(masked_sum(0.5 * lr_**2, m))  # approx KL(old || new), k2
                tok_stats[5] += float(masked_sum(ent.detach().float(), m))
                tok_stats[7] = max(float(tok_stats[7]), float(sanitize(res.ratio, m, float("-inf")).max()) if m.any() else 0.0)
                if models.critic is not None and slots.critic is not None and mb.returns is not None:
                    vals = critic_values(models.critic, mb, s)
                    vl = slots.critic(vals, mb.values, mb.returns, mb.mask, counts)
                    vl.backward()
                    v_loss += float(vl.detach())
            # each rank summed its share of the step's losses: the step's value is the sum over ranks
            pol_loss, kl_loss, v_loss = dist.all_reduce_sum(torch.tensor([pol_loss, kl_loss, v_loss],
                                                                         dtype=torch.float64)).tolist()
            step_m = {"loss/policy": pol_loss, "loss/kl": kl_loss, "optim/grad_norm": _summed_grad_norm(models.policy)}
            with_critic = critic_optimizer is not None and models.critic is not None
            if with_critic:
                step_m.update({"loss/value": v_loss, "critic/grad_norm": _summed_grad_norm(models.critic)})
            if guards.any_rank_nonfinite(step_m.values()):  # skip on every rank: weights, optimizer state kept
                skipped += 1
                models.policy.zero_grad(set_to_none=True)
                if with_critic:
                    models.critic.zero_grad(set_to_none=True)
            else:
                applied += 1
                _optimizer_step(models.policy, optimizer, s.max_grad_norm, step_m["optim/grad_norm"])
                if with_critic:
                    _optimizer_step(models.critic, critic_optimizer, s.max_grad_norm, step_m["critic/grad_norm"])
            if scheduler is not None:  # a skipped step still uses its slot of the schedule (as with AMP)
                guards.quiet_scheduler_step(scheduler)
            for k, v in step_m.items():
                acc.setdefault(k, []).append(v)
    out = {k: sum(v) / len(v) for k, v in acc.items()}  # includes skipped steps: a non-finite value shows
    out["optim/updates"] = float(applied)
    out["optim/skipped"] = float(skipped)
    tot = tok_stats.clone()
    tot[:7] = dist.all_reduce_sum(tok_stats[:7])
    tot[7] = max(dist.all_gather_object(float(tok_stats[7])))  # ratio/max over every rank's tokens
    ntok = float(tot[0]) if float(tot[0]) > 0 else float("nan")  # no update: these are undefined, not 0
    out.update({
        "clip/low_frac": float(tot[1]) / ntok,
        "clip/high_frac": float(tot[2]) / ntok,
        "ratio/mean": float(tot[3]) / ntok,
        "ratio/max": float(tot[7]) if float(tot[0]) > 0 else float("nan"),
        "ratio/approx_kl": float(tot[4]) / ntok,
        "entropy": float(tot[5]) / ntok,
        "optim/steps": float(s.epochs * s.minibatches),
    })
    if slots.kl.placement == "loss":
        out["kl/ref"] = float(tot[6]) / ntok
    return out


def _summed_grad_norm(model: torch.nn.Module) -> float:
    """Sum the trainable parameters' gradients over ranks (in place), then their total L2 norm
    (the same on every rank; NaN/inf when a gradient is not finite; 0 without gradients)."""
    params = [p for p in model.parameters() if p.requires_grad]
    dist.sum_gradients(params)
    grads = [p.grad for p in params if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


def _optimizer_step(model: torch.nn.Module, opt: torch.optim.Optimizer, max_norm: float | None, norm: float) -> None:
    """Clip the (summed) gradients to `max_norm` given their total `norm`, step, free the gradients."""
    params = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
    if max_norm is not None and params:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, torch.tensor(norm))
    opt.step()
    opt.zero_grad(set_to_none=True)  # free the gradients now: generation and forwards run without them


def per_row_metrics(objectives: Tensor, names: list[str], scores: Tensor) -> dict[str, Tensor]:
    """[N] tensors a sampling filter may name: `accuracy` (correctness == 1), each objective, `reward`."""
    out = {n: objectives[:, k] for k, n in enumerate(names)}
    if "correctness" in out:
        c = out["correctness"]  # NaN (could not be scored) stays NaN: left out, not counted wrong
        out["accuracy"] = torch.where(torch.isnan(c), c, (c == 1.0).float())
    out["reward"] = scores
    return out

