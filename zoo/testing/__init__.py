"""Tiny random models built in code, for tests: zoo's own and a plugin author's (no Hub, no weights on disk).

    from zoo.testing import tiny_model_and_tokenizer
    model, tok = tiny_model_and_tokenizer(seed=0)      # a 2-layer Llama and its character-level ChatML tokenizer
    model.save_pretrained(d); tok.save_pretrained(d)   # a directory any `model:` key of a run file accepts

The builders live in zoo.models.tiny; this is their public import path (as `torch.testing` is torch's).
No module of zoo imports either (tests/core/test_layers.py)."""

from zoo.models.tiny import (
    counting_model_and_tokenizer,
    set_counting,
    tiny_model_and_tokenizer,
    tiny_reward_model_and_tokenizer,
    tiny_tokenizer,
    tiny_vllm_model_and_tokenizer,
)

__all__ = [
    "counting_model_and_tokenizer",
    "set_counting",
    "tiny_model_and_tokenizer",
    "tiny_reward_model_and_tokenizer",
    "tiny_tokenizer",
    "tiny_vllm_model_and_tokenizer",
]
