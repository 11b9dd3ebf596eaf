"""Forward passes of the step: the policy's per-token log-probs, the critic's values, and the
rollout-time forwards (old log-probs, reference log-probs, values) computed only where a component
of the variant needs them. Shapes: n rows of a micro-batch, T completion tokens."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import torch
from torch import Tensor

from zoo.core.batch import Batch
from zoo.models.forward import position_ids_from_mask
from zoo.step.hooks import NO_HOOKS, Hooks
from zoo.step.logprobs import token_logprobs
from zoo.step.types import Models, Slots, StepSettings


def autocast(setting: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16/fp16 autocast for forward passes, or a no-op for "none". Log-softmax stays fp32
    (zoo.step.logprobs.token_logprobs). `setting` is a resolved one ("none" | "bf16" | "fp16"); raises
    ValueError for anything else, also for "auto" (resolve it first with
    `zoo.run.precision.resolve_autocast`)."""
    if setting == "none":
        return contextlib.nullcontext()
    if setting not in ("bf16", "fp16"):
        hint = ": resolve it first with zoo.run.precision.resolve_autocast" if setting == "auto" else ""
        raise ValueError(f"autocast {setting!r}: expected none, bf16 or fp16{hint}")
    dtype = torch.bfloat16 if setting == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def forward_logp(
    model: torch.nn.Module, mb: Batch, s: StepSettings, with_entropy: bool = False, entropy_grad: bool = False
):
    """(logp [n, T] float32, entropy [n, T] or None) of the micro-batch's completion tokens under
    `model` at the step's temperature; the entropy keeps its gradient only with `entropy_grad` (a
    loss term that needs it, e.g. the entropy bonus)."""
    with autocast(s.autocast, mb.prompt_ids.device):
        return token_logprobs(
            model,
            mb.input_ids(),
            mb.attention_mask(),
            mb.completion_ids.shape[1],
            temperature=s.temperature,
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
        )


def critic_values(critic: torch.nn.Module, mb: Batch, s: StepSettings) -> Tensor:
    """V(s_t) for each completion token t: the value head at the position that predicts token t.
    Returns [n, T] float32."""
    ids, att = mb.input_ids(), mb.attention_mask()
    P, T = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
    with autocast(s.autocast, ids.device):
        v = critic(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att))  # [n, P+T]
    return v[:, P - 1 : P - 1 + T].float()


def micro_rows(batch: Batch, size: int) -> list[Tensor]:
    """Row indices of consecutive micro-batches of at most `size` rows."""
    return list(torch.arange(batch.size).split(size))


def fill_rows(batch: Batch, parts: list[Tensor], rows: list[Tensor]) -> Tensor:
    """[N, T] float32 from per-micro-batch parts [n_i, T_i] (trimmed); 0 off the loss mask."""
    out = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)
    for r, p in zip(rows, parts):
        out[r, : p.shape[1]] = p.float().cpu()
    mask = batch.loss_mask.cpu()
    return torch.where(mask, out, torch.zeros_like(out)).to(batch.loss_mask.device)  # padding 0, as documented


@torch.no_grad()
def rollout_forwards(batch: Batch, models: Models, slots: Slots, s: StepSettings, hooks: Hooks = NO_HOOKS) -> Batch:
    """Old log-probs (only when a later optimizer step or a component reads them, e.g. the KL in
    the reward: with one on-policy update they equal the training forward's, detached), reference
    log-probs (only when a component reads them) and critic values (only with a critic). Each
    [N, T], 0 off the loss mask. `hooks.forward` sees each model forward."""
    need_old = s.epochs * s.minibatches > 1 or slots.reads("logp_old")
    rows = micro_rows(batch, s.micro_batch)
    old, ref, val = [], [], []
    for r in rows:
        mb = batch.select(r).trimmed()
        if need_old:
            with hooks.forward("policy", mb):
                old.append(forward_logp(models.policy, mb, s)[0])
        if slots.reads("logp_ref") and models.reference is not None:
            with models.reference() as ref_model, hooks.forward("reference", mb):
                ref.append(forward_logp(ref_model, mb, s)[0])
        if models.critic is not None:
            with hooks.forward("critic", mb):
                val.append(critic_values(models.critic, mb, s))
    return replace(
        batch,
        logp_old=fill_rows(batch, old, rows) if old else None,
        logp_ref=fill_rows(batch, ref, rows) if ref else None,
        values=fill_rows(batch, val, rows) if val else None,
    )
