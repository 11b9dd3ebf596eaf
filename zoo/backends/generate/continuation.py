"""`continue_` for HF models: extend each row from its own (uneven) prefix until a stop string, EOS or
the token budget, with the sampler's log-probs (multi-turn rollouts; the `generator` kind's contract,
zoo/core/kinds.py). Shapes: n rows, P the longest prefix, T new tokens."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from zoo.backends.generate.hf import (
    completion_mask,
    device_of,
    eval_no_grad,
    neutral_generation_config,
    sampling_config,
    stop_token_ids,
)
from zoo.backends.generate.stops import StopStrings
from zoo.backends.generate.warping import RolloutLogprobs, processor_list
from zoo.core.generator_types import Continuation, SamplingParams


def left_pad(prefix_ids: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Uneven token lists -> (ids [n, P] long left-padded with `pad_id`, mask [n, P] long).
    Raises ValueError for no rows or an empty row."""
    rows = [[int(t) for t in r] for r in prefix_ids]
    if not rows or any(not r for r in rows):
        raise ValueError("continue_ needs at least one row and no empty prefix")
    P = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (P - len(r)) + r for r in rows], dtype=torch.long, device=device)
    mask = torch.tensor([[0] * (P - len(r)) + [1] * len(r) for r in rows], dtype=torch.long, device=device)
    return ids, mask


def continue_rows(
    model: nn.Module,
    tokenizer,
    prefix_ids: Sequence[Sequence[int]],
    sampling: SamplingParams,
    stop: Sequence[str] = (),
    eos_token_ids: Sequence[int] | None = None,
) -> Continuation:
    """Sample new tokens after each row's prefix -> Continuation (see zoo.core.generator_types).

    prefix_ids: n token lists of any lengths (a row's prompt and the turns so far), left-padded here.
    sampling: the budget (`max_new_tokens`) and warping; `sampling.logits_processors` come first.
    stop: strings that end a row at the token completing them (they may span tokens); EOS always ends
        a row. The new tokens include the EOS or the stop string's last token.
    Seeding is the caller's. Raises ValueError for an empty row, an empty stop string, a budget < 1,
    temperature <= 0 when sampling, or a tokenizer without a pad token.
    """
    if sampling.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {sampling.max_new_tokens}")
    if sampling.do_sample and not sampling.temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {sampling.temperature}")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer has no pad token (use zoo.models.prepare_tokenizer)")
    pad_id = int(tokenizer.pad_token_id)
    stops = list(eos_token_ids) if eos_token_ids is not None else stop_token_ids(model, tokenizer)
    ids, mask = left_pad(prefix_ids, pad_id, device_of(model))  # [n, P]
    n, P = ids.shape
    crit = StopStrings(tokenizer, stop, P, n, stops)
    rec = RolloutLogprobs()
    procs = processor_list(
        sampling.logits_processors, sampling.temperature, sampling.top_k, sampling.top_p, sampling.do_sample, rec
    )
    gen_config = sampling_config(
        sampling.max_new_tokens, sampling.min_new_tokens, sampling.do_sample, pad_id, stops, tokenizer.bos_token_id
    )
    from transformers import StoppingCriteriaList

    with eval_no_grad(model), neutral_generation_config(model):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=gen_config,
            logits_processor=procs,
            stopping_criteria=StoppingCriteriaList([crit]),
            # ranks make different numbers of calls (multi-turn): never a per-token collective
            synced_gpus=False,
        )
    rec.finish(out[:, -1])
    new = out[:, P:]  # [n, T]
    T = new.shape[1]
    _, no_eos, eos_len = completion_mask(new, stops)
    ended = torch.tensor(crit.ended, dtype=torch.long, device=new.device)  # [n] -1: no stop string
    # a stop string is only looked for before the row's first EOS (StopStrings), so a row ends at one
    lengths = torch.where(ended >= 0, ended + 1, eos_len)  # [n]
    truncated = no_eos & (ended < 0)
    cmask = torch.arange(T, device=new.device)[None, :] < lengths[:, None]  # [n, T]
    new = torch.where(cmask, new, torch.full_like(new, pad_id))
    logp = rec.values().to(new.device) * cmask
    drop = (~no_eos & (ended < 0)).long()  # the EOS itself is not text; a stop string is
    texts = [
        tokenizer.decode(row[: k - e], skip_special_tokens=True)
        for row, k, e in zip(new.tolist(), lengths.tolist(), drop.tolist())
    ]
    which = [w if e >= 0 else None for w, e in zip(crit.which, crit.ended)]
    return Continuation(
        ids=new, mask=cmask, logp_rollout=logp, truncated=truncated, lengths=lengths, stopped_by=which, texts=texts
    )
