"""Checks made once the policy and tokenizer are loaded, before the first rollout allocates: the
prompts and `max_new_tokens` fit the model's context, and the step's rollout fits in memory
(`zoo.memory_estimate`). Each failure is one VariantError naming the knob."""
from __future__ import annotations

from typing import Any, Sequence

from zoo.memory_estimate import available_memory, check_rollout_fits
from zoo.config.variant import VariantError

LONGEST_SAMPLE = 64  # prompts tokenised to find the longest: the longest by characters


def longest_prompt_tokens(tokenizer: Any, rows: Sequence[dict[str, Any]], sample: int = LONGEST_SAMPLE) -> int:
    """Tokens of the longest prompt among `rows` (each with a `prompt`: chat messages or a string),
    rendered as the rollout renders it (`rollout.encode_prompts`); the `sample` longest rows by
    characters are tokenised. 0 for no rows."""
    from zoo.backends.generate.hf import encode_prompts

    prompts = sorted((r["prompt"] for r in rows), key=lambda p: -len(str(p)))[:sample]
    if not prompts:
        return 0
    ids, _ = encode_prompts(tokenizer, prompts)  # [B, P], left-padded to the longest
    return int(ids.shape[1])


def check_context(config: Any, prompt_tokens: int, max_new_tokens: int) -> None:
    """Raise VariantError when prompt + completion exceed the model's `max_position_embeddings`
    (transformers would only print a reminder and generate garbage positions)."""
    limit = getattr(config, "max_position_embeddings", None)
    if not limit or prompt_tokens + max_new_tokens <= limit:
        return
    if max_new_tokens >= limit:
        raise VariantError(f"budget.max_new_tokens {max_new_tokens} >= the model's context (max_position_embeddings "
                           f"{limit}): lower budget.max_new_tokens")
    raise VariantError(f"the longest prompt ({prompt_tokens} tokens) + budget.max_new_tokens {max_new_tokens} = "
                       f"{prompt_tokens + max_new_tokens} tokens exceed the model's context (max_position_embeddings "
                       f"{limit}): lower budget.max_new_tokens or shorten the prompts (task fewshot, system, "
                       "instruction)")


def check_before_rollout(cfg: Any, group_size: int, generate_rows: int, policy: Any, tokenizer: Any,
                         rows: Sequence[dict[str, Any]], kv_bytes: int, device: Any) -> dict[str, int]:
    """Both checks for a run: context of the longest of `rows` (train and eval prompts), then the
    rollout memory against what `device` has available. Returns the memory estimate (bytes)."""
    config = policy.config
    p = longest_prompt_tokens(tokenizer, rows)
    check_context(config, p, cfg.budget.max_new_tokens)
    return check_rollout_fits(cfg, group_size, generate_rows, config, p, kv_bytes, available_memory(device))
