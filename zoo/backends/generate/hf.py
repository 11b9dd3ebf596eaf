"""Generation: prompts, sampling with HF `generate` (the shared-prompt KV cache), completion masks and
truncation flags. The training-side per-token log-probs are in zoo.step.logprobs.

Shapes: N = completions in the rollout (prompts x group size G), P = prompt tokens (left-padded),
T = completion tokens (right-padded), L = P + T.

Conventions (docs/concepts/algorithms.md "Our conventions", docs/concepts/cases.md C6/C10):
- the completion mask covers generated tokens up to and including the first EOS (C6);
- a completion is truncated when it has no EOS, i.e. generation stopped at max_new_tokens;
- position ids follow the attention mask under left padding (C10, `zoo.models.forward.position_ids_from_mask`).
  Sampler-side top-k/top-p are disabled by default, so the sampling distribution is logits / temperature.
"""

from __future__ import annotations

import numbers
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch import Tensor, nn

from zoo.backends.generate import progress as step_progress
from zoo.backends.generate.images import encode_image_prompts, placeholder_suppressor
from zoo.backends.generate.sampling_config import sampling_config  # noqa: F401 - imported from here too
from zoo.backends.generate.warping import RolloutLogprobs, processor_list
from zoo.core.batch import Batch
from zoo.core.media import RowMedia, media_inputs
from zoo.models.forward import (
    cache_arg,
    inner_lm,
    one_row_each,
    position_ids_from_mask,
    prefix_first,
    prompt_cache,
    shared_prefix_len,
)


# --------------------------------------------------------------------------- masks
def _eos_tensor(eos: int | Iterable[int], device: torch.device) -> Tensor:
    scalar = isinstance(eos, numbers.Integral) or (isinstance(eos, Tensor) and eos.dim() == 0)
    ids = [int(eos)] if scalar else [int(e) for e in eos]
    if not ids:
        raise ValueError("need at least one EOS id")
    return torch.tensor(ids, dtype=torch.long, device=device)


def completion_mask(completion_ids: Tensor, eos_id: int | Iterable[int]) -> tuple[Tensor, Tensor, Tensor]:
    """Mask of real completion tokens: everything up to and including the first EOS (C6).

    completion_ids: [N, T] generated tokens, right-padded (pad may equal EOS or not).
    eos_id: one id or a collection of stop ids (chat models may have several).
    Returns (mask [N, T] bool, truncated [N] bool = no EOS in the row, lengths [N] long = mask.sum(1)).
    C6: rows [t, EOS, EOS, EOS], [t, t, t, EOS] -> mask [[1,1,0,0],[1,1,1,1]], truncated [F, F].
    Raises ValueError unless completion_ids is 2-D or when no EOS id is given.
    """
    if completion_ids.dim() != 2:
        raise ValueError(f"completion_ids must be [N, T], got shape {tuple(completion_ids.shape)}")
    is_eos = torch.isin(completion_ids, _eos_tensor(eos_id, completion_ids.device))  # [N, T]
    eos_before = is_eos.long().cumsum(1) - is_eos.long()  # [N, T] EOS strictly before t
    mask = eos_before == 0  # [N, T]
    truncated = ~is_eos.any(1)  # [N]
    return mask, truncated, mask.sum(1)


# --------------------------------------------------------------------------- generation
def device_of(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (where its inputs go)."""
    return next(model.parameters()).device


@contextmanager
def eval_no_grad(model: nn.Module) -> Iterator[None]:
    """Eval mode under no_grad for the block; the model's train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


@contextmanager
def neutral_generation_config(model: nn.Module) -> Iterator[None]:
    """Temporarily replace the model's generation_config by an empty one, so nothing from a
    checkpoint's generation_config.json (top_k, repetition_penalty, min_p ...) leaks into sampling."""
    from transformers import GenerationConfig

    lm = inner_lm(model)
    saved = lm.generation_config
    lm.generation_config = GenerationConfig()
    try:
        yield
    finally:
        lm.generation_config = saved


def stop_token_ids(model: nn.Module, tokenizer) -> list[int]:
    """EOS ids that end a completion: the tokenizer's eos plus the model generation_config's eos id(s)."""
    ids = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    gen_eos = getattr(getattr(inner_lm(model), "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        ids += [int(e) for e in ([gen_eos] if isinstance(gen_eos, int) else gen_eos)]
    ids = list(dict.fromkeys(ids))
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation_config defines an EOS id")
    return ids


#: prompts per tokenizer call in `encode_prompts` (our choice): ~0.1 s of native work on a 2-core CPU, so
#: Ctrl-C / SIGTERM (acted on between Python bytecodes) stops even a 1,000,000-prompt step within a second
ENCODE_CHUNK = 1024


def encode_prompts(tokenizer, prompts: Sequence[str] | Sequence[list[dict]], device=None) -> tuple[Tensor, Tensor]:
    """Tokenise prompts with left padding -> (ids [B, P] long, mask [B, P] long).

    Chat prompts (lists of {"role", "content"} dicts) go through
    `apply_chat_template(add_generation_prompt=True)` and are encoded without extra special tokens
    (the template adds what it needs); plain strings are encoded with the tokenizer's special tokens.
    All prompts must be of one kind. Raises ValueError on an empty list or mixed kinds.
    """
    if not prompts:
        raise ValueError("no prompts")
    is_chat = [not isinstance(p, str) for p in prompts]
    if any(is_chat) and not all(is_chat):
        raise ValueError("prompts mix chat message lists and plain strings")
    if all(is_chat):
        texts = [tokenizer.apply_chat_template(list(p), add_generation_prompt=True, tokenize=False) for p in prompts]
        add_special = False
    else:
        texts, add_special = list(prompts), True
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:  # chunks: one native call over a huge batch would hold off Ctrl-C / SIGTERM for minutes
        encs = [
            tokenizer(texts[i : i + ENCODE_CHUNK], padding=True, add_special_tokens=add_special, return_tensors="pt")
            for i in range(0, len(texts), ENCODE_CHUNK)
        ]
    finally:
        tokenizer.padding_side = old_side
    width = max(e["input_ids"].shape[1] for e in encs)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0  # a lone chunk needs none
    ids = torch.cat([_pad_left(e["input_ids"], width, int(pad)) for e in encs])  # [B, P]
    mask = torch.cat([_pad_left(e["attention_mask"], width, 0) for e in encs])  # [B, P]
    if device is not None:
        ids, mask = ids.to(device), mask.to(device)
    return ids, mask


def _pad_left(t: Tensor, width: int, value: int) -> Tensor:
    """[B, w] -> [B, width], `value` prepended (the chunks of `encode_prompts` to one width)."""
    return t if t.shape[1] == width else torch.nn.functional.pad(t, (width - t.shape[1], 0), value=value)


def _pad_right(t: Tensor, width: int, value: int) -> Tensor:
    if t.shape[1] == width:
        return t
    return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)


def generate_rollout(
    model: nn.Module,
    tokenizer,
    prompts: Sequence[str] | Sequence[list[dict]],
    *,
    group_size: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int | None = 0,
    do_sample: bool = True,
    micro_batch: int | None = None,
    eos_token_ids: Sequence[int] | None = None,
    share_prompts: bool = True,
    min_new_tokens: int = 0,
    logits_processors: Sequence = (),
    images: Sequence[Sequence[Any]] | None = None,
    processor=None,
    generator: torch.Generator | None = None,
) -> Batch:
    """Sample `group_size` completions per prompt with HF `generate` -> `Batch` (N = len(prompts) * G).

    The Batch is prompt-major: rows p*G .. p*G+G-1 answer prompts[p] and have group id p; it holds
    prompt_ids [N, P] (left-padded), prompt_mask [N, P] bool, completion_ids [N, T] (pad id after the
    first EOS), loss_mask [N, T] (up to and including the first EOS, C6), truncated [N], lengths [N]
    and texts (decoded to the first EOS, special tokens skipped); `rows` is left empty. logp_rollout
    [N, T] float32: the log-softmax of the distribution each token was drawn from (after
    `logits_processors`, then temperature, top-k, top-p in transformers' order; greedy: of logits /
    temperature), 0 off the loss mask, read from the scores `generate` samples from (no extra forward,
    `zoo.backends.generate.warping`).

    prompts: plain strings or chat message lists (see `encode_prompts`).
    temperature, top_p, top_k, do_sample: the only sampling controls in effect; top_k 0/None =
        disabled (transformers would otherwise apply 50). Nothing else from the model's
        generation_config applies (repetition penalty, min_p ... are neutral).
    micro_batch: rows per `generate` call (default all N).
    eos_token_ids: stop ids (default `stop_token_ids(model, tokenizer)`).
    share_prompts: run each distinct prompt of a `generate` call through the model once (all but its
        last token), and start the G rows of its group from copies of that KV cache (`_shared_prefill`)
        instead of G identical prefills.
    min_new_tokens: stop ids are suppressed until a completion has this many tokens (HF's
        `min_new_tokens`); `max_new_tokens` makes every completion full length (benchmarks).
    logits_processors: extra `transformers.LogitsProcessor`s on the raw logits, before the warping.
    images, processor: an image task's images per prompt (`encode_image_prompts`) and the policy's
        vision-language processor; the Batch's `media` then holds each row's processor outputs, passed to
        `generate` with the rows (prompts are not shared: the same text may come with other images).
    Seeding is the caller's: `torch.manual_seed(...)` before the call, or `generator`: the draws then
        come from it alone (`warping.SeededDraw` after the recorder, `generate` in greedy mode), never
        from torch's global RNG (a rollout worker in a thread, zoo/backends/generate/rollout_worker.py).
    The model runs in eval mode under no_grad; its train/eval mode is restored afterwards. Works on
    any device (inputs follow the model's parameters).
    Raises ValueError for group_size < 1, max_new_tokens < 1, temperature <= 0 when sampling, or a
    tokenizer without a pad token.
    """
    _check_rollout_args(tokenizer, group_size, max_new_tokens, temperature, do_sample)
    device = device_of(model)
    stops = list(eos_token_ids) if eos_token_ids is not None else stop_token_ids(model, tokenizer)
    pad_id = int(tokenizer.pad_token_id)
    ids, mask, prompt_index, media = _grouped_prompts(tokenizer, prompts, group_size, device, images, processor)
    share_prompts = share_prompts and media is None
    if media is not None:  # a sampled placeholder would ask the forward for an image that is not there
        logits_processors = [*logits_processors, placeholder_suppressor(processor)]
    own_draw = generator is not None and do_sample  # SeededDraw picks the token, generate takes the argmax
    gen_config = sampling_config(
        max_new_tokens, min_new_tokens, do_sample and not own_draw, pad_id, stops, tokenizer.bos_token_id
    )
    processors = partial(
        processor_list, logits_processors, temperature, int(top_k or 0), top_p, do_sample, generator=generator
    )
    chunks, logps = _sample_chunks(
        model, ids, mask, prompt_index, gen_config, processors, micro_batch or ids.shape[0], share_prompts, media
    )
    b = _rollout_batch(tokenizer, ids, mask, prompt_index, chunks, logps, stops, pad_id)
    return b if media is None else replace(b, media=media)


def _check_rollout_args(tokenizer, group_size: int, max_new_tokens: int, temperature: float, do_sample: bool) -> None:
    """Raises ValueError for group_size < 1, max_new_tokens < 1, temperature <= 0 when sampling, or a
    tokenizer without a pad token."""
    if group_size < 1 or max_new_tokens < 1:
        raise ValueError(f"group_size and max_new_tokens must be >= 1 (got {group_size}, {max_new_tokens})")
    if do_sample and not temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token (use zoo.models.prepare_tokenizer)")


def _grouped_prompts(
    tokenizer,
    prompts: Sequence[str] | Sequence[list[dict]],
    group_size: int,
    device: torch.device,
    images: Sequence[Sequence[Any]] | None = None,
    processor=None,
) -> tuple[Tensor, Tensor, Tensor, list[RowMedia] | None]:
    """The prompts encoded (`encode_prompts`; with `images`, `encode_image_prompts`), each repeated
    `group_size` times, prompt-major -> (ids [N, P], mask [N, P] long, prompt_index [N]: the prompt of
    each row, its group id, the N rows' RowMedia or None)."""
    media = None
    if images is None:
        ids, mask = encode_prompts(tokenizer, prompts, device=device)  # [B, P]
    elif processor is None:
        raise ValueError("prompts with images need the policy's processor (a vision-language model)")
    else:
        ids, mask, per_prompt = encode_image_prompts(processor, prompts, images, device=device)  # [B, P]
        media = [per_prompt[p] for p in range(len(prompts)) for _ in range(group_size)]  # N, shared per group
    ids = ids.repeat_interleave(group_size, dim=0)  # [N, P] prompt-major
    mask = mask.repeat_interleave(group_size, dim=0)  # [N, P]
    prompt_index = torch.arange(len(prompts), device=device).repeat_interleave(group_size)  # [N]
    return ids, mask, prompt_index, media


def _sample_chunks(
    model: nn.Module,
    ids: Tensor,
    mask: Tensor,
    prompt_index: Tensor,
    gen_config,
    processors: Callable[[RolloutLogprobs], Any],
    micro_batch: int,
    share_prompts: bool,
    media: list[RowMedia] | None = None,
) -> tuple[list[Tensor], list[Tensor]]:
    """`generate` over the rows [N, P] in chunks of `micro_batch` rows (eval mode, no_grad, the model's
    generation_config neutral) -> (completion ids [mb, T_chunk] per chunk, their logp_rollout
    [mb, T_chunk] per chunk). processors(recorder): the logits processors, the recorder last.
    media: the rows' images (`zoo.core.media`), passed to `generate` with their rows."""
    N, P = ids.shape
    chunks: list[Tensor] = []
    logps: list[Tensor] = []
    # a long step shows its progress chunk by chunk (zoo.backends.generate.progress)
    step_progress.report("generate", 0, N)
    with eval_no_grad(model), neutral_generation_config(model):
        for s in range(0, N, micro_batch):
            rows = slice(s, s + micro_batch)
            g_ids, g_mask, prefix = ids[rows], mask[rows], {}
            if share_prompts:
                g_ids, g_mask, prefix = _shared_prefill(model, g_ids, g_mask, prompt_index[rows])
            if media is not None:  # the rows' images (pixel_values, image_grid_thw, mm_token_type_ids ...)
                prefix = {**prefix, **media_inputs(media[rows], mask[rows], P, ids.device)}
            rec = RolloutLogprobs()
            out = model.generate(
                input_ids=g_ids,
                attention_mask=g_mask,
                generation_config=gen_config,
                logits_processor=processors(rec),
                **prefix,  # [mb, P + T_chunk]
                # an FSDP2 model is generated with its weights gathered (zoo.backends.train.strategy.gather_weights):
                # no lockstep over ranks (transformers would all-reduce each token's "done" flag)
                synced_gpus=False,
            )
            del prefix
            rec.finish(out[:, -1])
            chunks.append(out[:, P:])
            logps.append(rec.values())
            step_progress.report("generate", min(s + micro_batch, N), N)
    return chunks, logps


def _rollout_batch(
    tokenizer,
    ids: Tensor,
    mask: Tensor,
    prompt_index: Tensor,
    chunks: list[Tensor],
    logps: list[Tensor],
    stops: Sequence[int],
    pad_id: int,
) -> Batch:
    """The chunks right-padded to one width T and joined -> the rollout's Batch (completion mask,
    truncation flags, lengths, texts, logp_rollout 0 off the mask)."""
    T = max(c.shape[1] for c in chunks)
    completion_ids = torch.cat([_pad_right(c, T, pad_id) for c in chunks], dim=0)  # [N, T]
    cmask, truncated, lengths = completion_mask(completion_ids, stops)
    texts = decode_completions(tokenizer, completion_ids, cmask, truncated)
    logp_rollout = torch.cat([_pad_right(x, T, 0) for x in logps], dim=0).to(cmask.device)  # [N, T]
    logp_rollout = torch.where(cmask.bool(), logp_rollout, 0.0)  # 0 off the mask (x 0 would keep a pad's -inf as NaN)
    return Batch(
        prompt_ids=ids,
        prompt_mask=mask.bool(),
        completion_ids=completion_ids,
        loss_mask=cmask,
        group_ids=prompt_index,
        truncated=truncated,
        lengths=lengths,
        policy_tokens=cmask.sum(1),
        texts=texts,
        logp_rollout=logp_rollout,
    )


def _shared_prefill(model: nn.Module, ids: Tensor, mask: Tensor, prompt_index: Tensor) -> tuple[Tensor, Tensor, dict]:
    """A KV cache for rows [n, P] whose prompts repeat or share a prefix: the distinct prompts' first P-1
    tokens run once, a prefix that every prompt starts with (`shared_prefix_len`) once for all, and the
    cache is expanded to the n rows; `generate` then runs only the last prompt token per row.
    Returns (ids, mask, {cache kwarg: cache}) for `generate`: with a shared prefix, ids and mask in
    `prefix_first` column order (the same tokens and positions, pads after the prefix); (ids, mask, {})
    when nothing repeats or the model takes no cache."""
    name = cache_arg(model)
    n, P = ids.shape
    if name is None or P < 2:
        return ids, mask, {}
    K = min(shared_prefix_len(ids, mask), P - 1)
    uniq, inverse = torch.unique(prompt_index, return_inverse=True)
    U = uniq.shape[0]
    if U == n and not K:
        return ids, mask, {}
    first = one_row_each(inverse, U)  # [U]
    g_ids, g_mask = ids, mask
    if K:
        order = prefix_first(mask, K)  # [n, P]
        g_ids, g_mask = ids.gather(1, order), mask.gather(1, order)
    pm = g_mask[first, : P - 1]
    if not bool(pm.bool().any(1).all()):
        return ids, mask, {}  # a one-token prompt: nothing to prefill for it
    cache, _ = prompt_cache(model, g_ids[first, : P - 1], pm, position_ids_from_mask(pm), K)
    if cache is None:
        return ids, mask, {}
    cache.batch_select_indices(inverse)
    return g_ids, g_mask, {name: cache}


def decode_completions(tokenizer, completion_ids: Tensor, mask: Tensor, truncated: Tensor) -> list[str]:
    """Texts of completions [N, T] up to the first EOS, special tokens skipped. The EOS itself is
    dropped; a stop id that is an ordinary token (an arm of `model: "arms:a,b"`, zoo.models.arms)
    is text and stays."""
    texts = []
    special = set(tokenizer.all_special_ids)
    for row, m, trunc in zip(completion_ids.tolist(), mask.sum(1).tolist(), truncated.tolist()):
        n = m if trunc or (m and row[m - 1] not in special) else m - 1  # drop the EOS itself
        texts.append(tokenizer.decode(row[:n], skip_special_tokens=True))
    return texts
