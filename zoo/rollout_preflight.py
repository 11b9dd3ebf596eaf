"""Checks made once the policy and tokenizer are loaded, before the first rollout allocates: the
prompts and `max_new_tokens` fit the model's context, and the step's rollout fits in memory
(`zoo.memory_estimate`). Each failure is one VariantError naming the knob. Warnings (the run starts):
a LoRA rank above the width of the layers it adapts (`lora_rank_warnings`), a step that asks for
far more prompts than the task has (`work_warnings`)."""
from __future__ import annotations

import logging
from typing import Any, Sequence

from zoo.memory_estimate import available_memory, check_rollout_fits
from zoo.config.variant import VariantError

log = logging.getLogger(__name__)

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
    for w in lora_rank_warnings(cfg, policy):
        log.warning(w)
    p = longest_prompt_tokens(tokenizer, rows)
    check_context(config, p, cfg.budget.max_new_tokens)
    return check_rollout_fits(cfg, group_size, generate_rows, config, p, kv_bytes, available_memory(device))


def lora_rank_warnings(cfg: Any, policy: Any) -> list[str]:
    """A warning when `model_opts.lora.r` exceeds min(in, out) of a layer LoRA adapts: the update
    B A of rank r cannot have rank above that width, so the extra rank adds parameters and compute but
    no expressiveness. Names the narrowest adapted layer. policy: the loaded (peft) policy."""
    lora = getattr(cfg.model_opts, "lora", None)
    if lora is None:
        return []
    widths = {}
    for name, mod in policy.named_modules():
        base = getattr(mod, "base_layer", None)
        if hasattr(mod, "lora_A") and base is not None and hasattr(base, "in_features"):
            widths[name] = min(int(base.in_features), int(base.out_features))
    if not widths or lora.r <= min(widths.values()):
        return []
    name = min(widths, key=widths.get)
    return [f"model_opts.lora.r = {lora.r} is larger than the width of the layers it adapts ({name.split('.')[-1]!r} "
            f"in {name!r}: min(in, out) = {widths[name]}): a rank above a layer's width adds parameters but no "
            f"expressiveness; use r <= {min(widths.values())}"]


#: a step asking for more than this many times the task's training prompts is warned about
PROMPT_REPEAT_WARN = 4


def work_warnings(cfg: Any, group_size: int, train_rows: int) -> list[str]:
    """A warning when `budget.prompts_per_step` is above PROMPT_REPEAT_WARN x the task's `train_rows`
    training prompts: one step then repeats each prompt many times, with group_size completions
    each, and runs that long before its first update. ([] otherwise.)"""
    b, out = cfg.budget, []
    if train_rows and b.prompts_per_step > PROMPT_REPEAT_WARN * train_rows:
        out.append(f"budget.prompts_per_step = {b.prompts_per_step} is {b.prompts_per_step / train_rows:.3g}x the "
                   f"task's {train_rows} training prompts: each step repeats every prompt about "
                   f"{b.prompts_per_step // train_rows} times ({b.prompts_per_step * group_size} completions per step, all "
                   "generated before the step's first update); lower budget.prompts_per_step")
    return out
