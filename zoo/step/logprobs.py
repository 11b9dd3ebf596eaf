"""Per-token log-probs of completion tokens under a model: the training forward (policy, old and
reference log-probs), with a group's prompt run once and continued from its KV cache.

Shapes: N rows, L = P + T tokens (prompt left-padded, completion right-padded), T completion
tokens, V vocabulary size. Log-probs come from logits / temperature with log-softmax in fp32, even
under bf16 autocast (docs/concepts/algorithms.md "Our conventions"); position ids follow the mask (C10).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from zoo.backends.train.strategy import runs_collectives
from zoo.core.media import RowMedia, media_inputs
from zoo.models.forward import (
    accepts_logits_to_keep,
    cache_arg,
    inner_lm,
    own_positions,
    position_ids_from_mask,
    shared_prompt_forward,
)
from zoo.models.policy import is_checkpointing


def can_share_prompts(model: nn.Module) -> bool:
    """Whether `model` may run a prompt once for the rows that share it: it takes a KV cache, runs no
    collectives (ranks must run the same number of forwards) and is not checkpointing in training."""
    lm = inner_lm(model)
    if cache_arg(model) is None or runs_collectives(model):  # ranks must run the same number of forwards
        return False
    return not (is_checkpointing(lm) and lm.training)  # checkpointing turns the cache off in training mode


def _shared_prompt_logprobs(
    model: nn.Module,
    ids: Tensor,
    att: Tensor,
    pos: Tensor,
    T: int,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
    with_sum_sq: bool = False,
):
    """`token_stats` for rows [n, L] whose prompts (the first P = L - T columns, ids and mask)
    repeat: each distinct prompt runs once (U rows), its KV cache is expanded to the n rows, and the
    completions continue from it. The logits predicting completion token 0 come from the prompt's
    last position, those predicting tokens 1..T-1 from the continuation over tokens 0..T-2. Prompt
    positions are computed U instead of n times (G x fewer for whole groups), and a prefix that every
    prompt starts with (`zoo.models.forward.shared_prefix_len`: the system turn and worked shots) once.
    Returns None when every prompt is distinct and no prefix is shared (or the model returned no cache):
    the caller runs the plain forward."""
    res = shared_prompt_forward(model, ids, att, pos, T, read=lambda out: out.logits)
    if res is None:
        return None
    first_logits, logits = res  # [n, 1, V], [n, T-1, V] or None
    P = ids.shape[1] - T  # completion columns are where they were (only prompt columns move)
    head = _chosen_logprobs(first_logits, ids[:, P : P + 1], temperature, with_entropy, entropy_grad, with_sum_sq)
    del first_logits
    if logits is None:
        return head
    tail = _chosen_logprobs(logits, ids[:, P + 1 :], temperature, with_entropy, entropy_grad, with_sum_sq)
    del logits
    return tuple(None if a is None else torch.cat([a, b], dim=1) for a, b in zip(head, tail))


def _chosen_logprobs(
    logits: Tensor,
    tokens: Tensor,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool = False,
    with_sum_sq: bool = False,
):
    """logits [n, T, V] (any dtype), tokens [n, T] -> (logp [n, T] fp32, entropy [n, T] fp32 or None,
    sum_v pi_v^2 [n, T] fp32 or None). The entropy carries a gradient only with `entropy_grad` (an
    entropy bonus); otherwise its full-vocabulary softmax is not kept for backward. sum_v pi_v^2 (with
    `with_sum_sq`; never a gradient) is exp(logsumexp(2 z) - 2 logsumexp(z)), z = logits / temperature
    (verl `calculate_sum_pi_squared_from_logits`, verl/utils/torch_functional.py), one row at a time."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        z = logits.float()  # [n, T, V] fp32 (the same tensor when the logits already are)
        if temperature != 1.0:
            z = z / temperature  # no [n, T, V] copy at temperature 1
        lse = torch.logsumexp(z, dim=-1)  # [n, T]
        logp = z.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse  # [n, T]
        entropy = None
        if with_entropy and entropy_grad and torch.is_grad_enabled():
            p = torch.softmax(z, dim=-1)  # [n, T, V]
            entropy = lse - (p * z).sum(-1)  # [n, T]  H = lse - E_p[z]
        elif with_entropy:  # no gradient: one row at a time, so no [n, T, V] temporaries pile up
            with torch.no_grad():
                entropy = torch.cat(
                    [lr - (torch.softmax(zr, dim=-1) * zr).sum(-1) for zr, lr in zip(z.split(1), lse.split(1))]
                )  # [n, T]
        sum_sq = None
        if with_sum_sq:  # one row at a time, as the entropy above: an [1, T, V] temporary at most
            with torch.no_grad():
                sum_sq = torch.cat(
                    [torch.exp(torch.logsumexp(2 * zr, dim=-1) - 2 * lr) for zr, lr in zip(z.split(1), lse.split(1))]
                )  # [n, T]
    return logp, entropy, sum_sq


def token_logprobs(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    n_completion: int,
    *,
    temperature: float = 1.0,
    micro_batch: int | None = None,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    share_prompts: bool = True,
    media: Sequence[RowMedia] | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each of the last T = n_completion tokens under `model` (the training forward too).

    input_ids: [N, L] prompt + completion (`Batch.input_ids()`); attention_mask: [N, L].
    Returns (logp [N, T] float32, entropy [N, T] float32 full-vocabulary entropy, or None).
    logp[i, t] = log softmax(logits[i, L-T-1+t] / temperature)[input_ids[i, L-T+t]], computed in
    fp32 even under bf16 autocast; position ids from the mask (C10). Only T+1 positions of logits are
    materialised (`logits_to_keep`, when the model supports it) and full-vocabulary tensors live
    one micro-batch (`micro_batch` rows, default all) at a time. Gradients flow when grad is
    enabled. Values at masked completion slots are finite but meaningless: mask them.
    entropy_grad: let the entropy carry a gradient (for an entropy bonus); by default it is computed
    without one, so its [n, T, V] softmax is freed at once.
    share_prompts: rows of a micro-batch with the same prompt (the G completions of a group) run the
    prompt through the model once and continue from its KV cache (`_shared_prompt_logprobs`); the
    values equal the plain forward's up to float rounding, gradients flow through the shared prompt.
    Used only when some prompt repeats and the model supports a KV cache (not with activation
    checkpointing in training mode, which disables the cache).
    media: the rows' images (`Batch.media`, N `RowMedia`): their processor outputs are passed to every
    forward, collated per micro-batch (`zoo.core.media.media_inputs`); prompts are then never shared
    (two rows with one text may hold different images), and a model that computes its own positions
    (`own_positions`: Qwen2-VL's M-RoPE) is given none where a row of the micro-batch has images (rows
    without any get positions from the mask, as text). None (text): the forwards are unchanged.
    Raises ValueError for shape mismatches, n_completion outside [1, L-1] or temperature <= 0.
    """
    logp, entropy, _ = token_stats(
        model,
        input_ids,
        attention_mask,
        n_completion,
        temperature=temperature,
        micro_batch=micro_batch,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
        share_prompts=share_prompts,
        media=media,
    )
    return logp, entropy


def token_stats(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    n_completion: int,
    *,
    temperature: float = 1.0,
    micro_batch: int | None = None,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    with_sum_sq: bool = False,
    share_prompts: bool = True,
    media: Sequence[RowMedia] | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """`token_logprobs` (the same forwards and arguments), plus, with `with_sum_sq`, each position's
    sum over the vocabulary of pi_v^2, pi = softmax(logits / temperature) in fp32, from the same
    logits (no gradient; one row's [1, T, V] temporary at a time): (logp [N, T], entropy [N, T] or
    None, sum_sq [N, T] or None). Raises what `token_logprobs` raises."""
    if input_ids.dim() != 2 or input_ids.shape != attention_mask.shape:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} must both be [N, L]"
        )
    N, L = input_ids.shape
    T = int(n_completion)
    if not 1 <= T < L:
        raise ValueError(f"n_completion={T} must be in [1, {L - 1}]")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    keep = accepts_logits_to_keep(model)
    position_ids = position_ids_from_mask(attention_mask)  # [N, L]
    share = share_prompts and media is None and can_share_prompts(model)
    own = media is not None and own_positions(model)
    flags = (temperature, with_entropy, entropy_grad, with_sum_sq)
    mb = micro_batch or N
    parts = []  # per micro-batch (logp, entropy or None, sum_sq or None)
    for s in range(0, N, mb):
        ids, att, pos = input_ids[s : s + mb], attention_mask[s : s + mb], position_ids[s : s + mb]
        shared = _shared_prompt_logprobs(model, ids, att, pos, T, *flags) if share else None
        if shared is not None:
            parts.append(shared)
            continue
        kwargs = dict(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
        if media is not None:  # the rows' images, collated for these rows (zoo.core.media)
            kwargs.update(media_inputs(media[s : s + mb], att[:, : L - T], L, ids.device))
            # M-RoPE from the images: the model's own positions; a micro-batch without any image keeps the
            # mask's (C10; under RoPE the model's 0-based ones would differ only by a shift per row)
            if own and any(m.items for m in media[s : s + mb]):
                kwargs["position_ids"] = None
        if keep:
            kwargs["logits_to_keep"] = T + 1
        logits = model(**kwargs).logits  # [mb, T+1, V] (or [mb, L, V] without logits_to_keep)
        logits = logits[:, -T - 1 : -1]  # [mb, T, V]: position j predicts token j+1
        parts.append(_chosen_logprobs(logits, ids[:, L - T :], *flags))
        del logits
    logp, entropy, sum_sq = (None if p[0] is None else torch.cat(p, dim=0) for p in zip(*parts))  # each [N, T]
    return logp, entropy, sum_sq
