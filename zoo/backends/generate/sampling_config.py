"""The `GenerationConfig` every HF `generate` call of zoo samples with (moved out of
zoo.backends.generate.hf, which re-exports it): transformers' own processors off, the warping passed
as processors (`warping.processor_list`); and `rollout_kwargs`, the sampling arguments of a `generate_rollout` call."""

from __future__ import annotations

from typing import Sequence


def sampling_config(
    max_new_tokens: int, min_new_tokens: int, do_sample: bool, pad_id: int, stops: Sequence[int], bos_id: int | None
):
    """A GenerationConfig with every processor of transformers' own off (temperature 1, top-k 0, top-p 1,
    no repetition penalty, min-p ...): the warping is passed as processors (`warping.processor_list`),
    so the recorder of `logp_rollout` comes after it."""
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=min(int(min_new_tokens), max_new_tokens) or None,
        do_sample=do_sample,
        temperature=1.0,
        top_p=1.0,
        top_k=0 if do_sample else None,
        min_p=None,
        typical_p=1.0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        num_beams=1,
        num_return_sequences=1,
        pad_token_id=pad_id,
        eos_token_id=list(stops),
        bos_token_id=bos_id,
        use_cache=True,
        return_dict_in_generate=False,
    )


def rollout_kwargs(sampling) -> dict:
    """`generate_rollout`'s sampling arguments from a `zoo.core.generator_types.SamplingParams`: length,
    temperature, top-k/top-p, greedy or sampled, rows per call, minimum length (the caller adds its own
    extras: logits processors, images, a generator)."""
    return dict(
        max_new_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        do_sample=sampling.do_sample,
        micro_batch=sampling.micro_batch,
        min_new_tokens=sampling.min_new_tokens,
    )
