"""On-policy distillation in the step: the teacher scores the student's sampled tokens, and the
per-token reverse-KL signal joins the advantage after the normalizer.

    forwards   score_teacher(batch, teacher, cfg, tokenizer, settings) -> extras["logp_teacher"] [N, T]
    advantage  distill(batch, slots) -> advantages + signal, metrics distill/*

The signal (Thinking Machines, "On-Policy Distillation", 2025; tinker-cookbook
`rl/metrics.py::incorporate_kl_penalty`), with d_t = logp_old,t - logp_teacher,t on the loss mask:

    s_t = -beta * d_t                           (center: false, the sampled token's reverse KL)
    s_t = beta * (mean(d) - d_t)                (center: true, tinker's: the batch mean over every rank)
    s_t <- s_t + gamma * s_{t+1}                (gamma > 0: discounted sum of the later tokens' signal)
    A_t = A_task,t + s_t

It is added AFTER the normalizer: group_mean / rloo read only the sequence score and group_std would
rescale a dense signal. beta = 0 leaves every advantage as plain RL computed it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from zoo.core import dist
from zoo.core.batch import Batch
from zoo.step.distill_vocab import FIELD as VOCAB_FIELD
from zoo.step.distill_vocab import teacher_vocab
from zoo.step.forwards import fill_rows, forward_logp, micro_rows
from zoo.step.teacher_context import teacher_prompts
from zoo.step.types import Slots, StepSettings

FIELD = "logp_teacher"
__all__ = ["FIELD", "discounted", "distill", "distill_empty", "score_teacher", "teacher_prompts", "teacher_signal"]


@torch.no_grad()
def score_teacher(batch: Batch, teacher: Any, cfg: Any, tokenizer: Any, s: StepSettings, vocab: bool = False) -> Batch:
    """The teacher's log-probs of the student's sampled tokens, `extras["logp_teacher"]` [N, T] (0 off
    the loss mask), at `cfg.temperature` (cfg: zoo.config.distill.TeacherConfig), in forwards of
    `cfg.batch_size` rows, each row with the teacher's own prompt (`teacher_prompts`); with `vocab` also
    its full log-softmax, `extras["logp_teacher_vocab"]` [N, T, V] (zoo/step/distill_vocab.py)."""
    ids, mask = teacher_prompts(batch, tokenizer, cfg.context)
    tb = replace(batch, prompt_ids=ids, prompt_mask=mask)
    ts = replace(s, temperature=cfg.temperature)
    rows, parts, extra = micro_rows(tb, cfg.batch_size), [], {}
    with teacher.forward() as model:
        for r in rows:
            parts.append(forward_logp(model, tb.select(r).trimmed(), ts)[0])
        if vocab:  # a full-vocabulary loss term reads the teacher's whole distribution
            extra[VOCAB_FIELD] = teacher_vocab(model, tb, cfg.temperature, rows, s)
    return replace(batch, extras={**batch.extras, FIELD: fill_rows(batch, parts, rows), **extra})


def discounted(x: Tensor, gamma: float) -> Tensor:
    """y_t = x_t + gamma * y_{t+1} along the last dim (tinker-cookbook discounted_future_sum_vectorized)."""
    if gamma <= 0:
        return x
    out, run = torch.zeros_like(x), torch.zeros_like(x[..., 0])
    for t in range(x.shape[-1] - 1, -1, -1):
        run = x[..., t] + gamma * run
        out[..., t] = run
    return out


def teacher_signal(
    logp_old: Tensor, logp_teacher: Tensor, mask: Tensor, *, beta: float, gamma: float = 0.0, center: bool = False
) -> tuple[Tensor, float]:
    """(signal [N, T] to add to the advantages, the mean reverse KL d over the loss-mask tokens of
    every rank). Off the mask the signal before discounting is 0 (see the module doc)."""
    m = mask.float()
    d = (logp_old.float() - logp_teacher.float()) * m
    tot = dist.all_reduce_sum(torch.stack([d.sum(), m.sum()]).double().cpu())
    mean = float(tot[0] / tot[1].clamp(min=1))
    s = beta * m * (mean - d) if center else -beta * d
    return discounted(s, gamma), mean


def distill(batch: Batch, slots: Slots) -> tuple[Batch, dict[str, float]]:
    """The advantage plus the teacher's signal (when the variant has `distill:`), and its metrics:
    distill/reverse_kl (the mean of logp_old - logp_teacher over the trained tokens) and distill/beta."""
    if slots.distill is None:
        return batch, {}
    spec = slots.distill.spec
    if batch.logp_old is None or FIELD not in batch.extras:
        raise RuntimeError("distill: the batch has no logp_old or logp_teacher (the teacher did not score it)")
    sig, kl = teacher_signal(
        batch.logp_old, batch.extras[FIELD], batch.loss_mask, beta=spec.beta, gamma=spec.gamma, center=spec.center
    )
    adv = batch.advantages if batch.advantages is not None else torch.zeros_like(sig)
    return replace(batch, advantages=adv + sig.to(adv.device)), {"distill/reverse_kl": kl, "distill/beta": spec.beta}


def distill_empty(slots: Slots) -> None:
    """A rank with no rows joins the other ranks' sum in `teacher_signal` (center: true only)."""
    if slots.distill is not None and slots.distill.spec.center:
        dist.all_reduce_sum(torch.zeros(2, dtype=torch.float64))
