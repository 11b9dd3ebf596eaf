"""Forward passes of the step: the policy's per-token log-probs, the critic's values, and the
rollout-time forwards (old log-probs, reference log-probs, values, the optimal token baseline's
energy) computed only where a component of the variant needs them. Shapes: n rows of a micro-batch,
T completion tokens, V the vocabulary."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import torch
from torch import Tensor

from zoo.core.batch import Batch
from zoo.core.media import media_inputs
from zoo.models.forward import position_ids_from_mask, shared_prompt_forward
from zoo.step.hooks import NO_HOOKS, Hooks
from zoo.step.logprobs import can_share_prompts, token_logprobs, token_stats
from zoo.step.types import Models, Slots, StepSettings

#: the OTB energy field, `Batch.extras["otb_energy"]` [N, T], written by `rollout_forwards` when read
ENERGY = "otb_energy"


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
            media=mb.media,
        )


def old_forward(
    model: torch.nn.Module, mb: Batch, s: StepSettings, energy: bool = False
) -> tuple[Tensor, Tensor | None]:
    """The old forward of a micro-batch: (logp [n, T] float32 at the step's temperature, as
    `forward_logp`, and with `energy` the OTB energy [n, T] (`otb_energy`) from the same logits, else None)."""
    with autocast(s.autocast, mb.prompt_ids.device):
        logp, _, sum_sq = token_stats(
            model,
            mb.input_ids(),
            mb.attention_mask(),
            mb.completion_ids.shape[1],
            temperature=s.temperature,
            with_sum_sq=energy,
            media=mb.media,
        )
    return logp, (otb_energy(logp, sum_sq) if energy else None)


def otb_energy(logp: Tensor, sum_sq: Tensor) -> Tensor:
    """The optimal token baseline's per-token energy ("realized energy" increment, the Logit-Gradient
    Proxy of arXiv 2602.07078): 1 - 2 pi_j + sum_v pi_v^2 = ||e_j - pi||^2, the squared norm of the
    gradient of log pi_j with respect to the logits, pi the old policy's distribution at the sampling
    temperature and pi_j = exp(logp) of the sampled token. logp, sum_sq: [n, T] -> [n, T] float32.
    Source: verl `compute_optimal_token_baseline_advantage` (verl/trainer/ppo/core_algos.py: w = 1 -
    2 exp(old_log_probs) + sum_pi_squared) with `sum_pi_squared` from the old-log-prob forward's logits
    / temperature (verl/workers/engine/fsdp/transformer_impl.py, `calculate_sum_pi_squared`)."""
    return 1.0 - 2.0 * logp.float().exp() + sum_sq.float()


def critic_values(critic: torch.nn.Module, mb: Batch, s: StepSettings) -> Tensor:
    """V(s_t) for each completion token t: the value head at the position that predicts token t.
    Returns [n, T] float32."""
    ids, att = mb.input_ids(), mb.attention_mask()
    P, T = mb.prompt_ids.shape[1], mb.completion_ids.shape[1]
    with autocast(s.autocast, ids.device):
        shared = _shared_values(critic, ids, att, T) if mb.media is None else None
        if shared is not None:
            return shared.float()
        if mb.media is None:
            v = critic(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att))  # [n, P+T]
        else:  # an image task: the rows' images too, positions as the model computes them (zoo.core.media)
            v = critic(input_ids=ids, attention_mask=att, **media_inputs(mb.media, mb.prompt_mask, P + T, ids.device))
    return v[:, P - 1 : P - 1 + T].float()


def _shared_values(critic: torch.nn.Module, ids: Tensor, att: Tensor, T: int) -> Tensor | None:
    """V(s_t) [n, T] with each distinct prompt (and a prefix every prompt shares) run once through the
    critic's backbone (`zoo.models.forward.shared_prompt_forward`, as the policy's log-probs), or None
    when the critic is wrapped (ddp), cannot cache, or nothing is shared: the caller runs the plain forward."""
    backbone, head = getattr(critic, "backbone", None), getattr(critic, "_head", None)
    if backbone is None or head is None or not can_share_prompts(backbone):
        return None
    res = shared_prompt_forward(
        backbone, ids, att, position_ids_from_mask(att), T, read=lambda out: out.last_hidden_state
    )
    if res is None:
        return None
    first, rest = res  # [n, 1, H] the last prompt position, [n, T-1, H] completion tokens 0..T-2
    return head(first if rest is None else torch.cat([first, rest], dim=1))  # [n, T]


def idle_inputs(batch: Batch) -> dict[str, Tensor]:
    """The model inputs of the batch's first row with its images (`zoo.core.media.media_inputs`): what a
    rank with fewer micro-batches runs with zero loss under ddp/fsdp (`strategy.idle_backward`), so a
    vision-language policy's vision tower runs every collective a real micro-batch runs."""
    mb = batch.select([0]).trimmed()
    ids, att = mb.input_ids(), mb.attention_mask()
    return {"input_ids": ids, "attention_mask": att, **media_inputs(mb.media, mb.prompt_mask, ids.shape[1], ids.device)}


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


def reuses_old(slots: Slots, s: StepSettings) -> bool:
    """Whether the first optimizer step's old log-probs can be its training forward's, detached (then
    the rollout forwards skip them): one epoch, so those rows are trained once, before any optimizer
    step has changed the policy (pi_old = pi there, case C4), and nothing reads logp_old before the
    update (the KL in the reward) or declares it (`Slots.reads`)."""
    return s.epochs == 1 and not _reads_old(slots)


def _reads_old(slots: Slots) -> bool:
    """Whether a component reads the old forward of every row before the update: `logp_old`, or the
    OTB energy (`ENERGY`), which comes from the same forward."""
    return slots.reads("logp_old") or slots.reads(ENERGY)


def first_order(n: int, s: StepSettings, generator: torch.Generator | None = None) -> Tensor:
    """An epoch's row order as `update` splits it into minibatches: randperm(n) (from `generator`, else
    torch's global one) with several minibatches, else arange(n) (no random draw)."""
    return torch.randperm(n, generator=generator) if s.minibatches > 1 else torch.arange(n)


def old_rows(n: int, slots: Slots, s: StepSettings, order: Tensor | None) -> Tensor:
    """The rows whose old log-probs the rollout forwards compute, sorted: all n when a component reads
    them or a row is trained after an optimizer step (several epochs, or several minibatches without
    `order`); with `reuses_old` and epoch 0's `order`, only the rows of minibatches 2.. (the first
    minibatch's come from the training forward); none with one on-policy optimizer step."""
    if _reads_old(slots) or s.epochs > 1 or (s.minibatches > 1 and order is None):
        return torch.arange(n)
    if s.minibatches == 1:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat(order.tensor_split(s.minibatches)[1:]).sort().values


@torch.no_grad()
def rollout_forwards(
    batch: Batch, models: Models, slots: Slots, s: StepSettings, hooks: Hooks = NO_HOOKS, order: Tensor | None = None
) -> Batch:
    """Old log-probs (of the rows `old_rows` names: with one on-policy epoch and epoch 0's row `order`,
    `first_order`, not the first minibatch's, which `update(order=order)` takes from its training
    forward; none with a single on-policy update), reference log-probs (only when a component reads
    them) and critic values (only with a critic). Each [N, T], 0 off the loss mask and on rows not
    computed. When a component reads `otb_energy` (the `otb` estimator), every row's old forward runs
    and also gives `extras["otb_energy"]` [N, T] (`otb_energy`, 0 off the loss mask) from its logits.
    `hooks.forward` sees each model forward."""
    need = old_rows(batch.size, slots, s, order)
    energy = slots.reads(ENERGY)  # then need is every row (`_reads_old`)
    rows = micro_rows(batch, s.micro_batch)
    every = len(need) == batch.size  # then per micro-batch beside the others, as they always ran
    old_mbs = rows if every else [r for r in need.split(s.micro_batch) if len(r)]
    old, ref, val, ene = [], [], [], []

    def old_of(mb: Batch) -> None:
        with hooks.forward("policy", mb):
            lp, e = old_forward(models.policy, mb, s, energy)
        old.append(lp)
        ene.append(e)

    for r in () if every else old_mbs:  # a subset of the rows: micro-batches of their own
        old_of(batch.select(r).trimmed())
    for r in rows:
        mb = batch.select(r).trimmed()
        if every:
            old_of(mb)
        if slots.reads("logp_ref") and models.reference is not None:
            with models.reference() as ref_model, hooks.forward("reference", mb):
                ref.append(forward_logp(ref_model, mb, s)[0])
        if models.critic is not None:
            with hooks.forward("critic", mb):
                val.append(critic_values(models.critic, mb, s))
    extras = {**batch.extras, ENERGY: fill_rows(batch, ene, old_mbs)} if energy else batch.extras
    return replace(
        batch,
        logp_old=fill_rows(batch, old, old_mbs) if old else None,
        logp_ref=fill_rows(batch, ref, rows) if ref else None,
        values=fill_rows(batch, val, rows) if val else None,
        extras=extras,
    )
