"""The prompts and `max_new_tokens` fit the model's context (`max_position_embeddings` in its
config.json); the prompts are tokenised by the policy's tokenizer as the rollout renders them."""

from __future__ import annotations

from typing import Any, Sequence

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import AfterLoad
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
        raise VariantError(
            f"budget.max_new_tokens {max_new_tokens} >= the model's context (max_position_embeddings "
            f"{limit}): lower budget.max_new_tokens"
        )
    raise VariantError(
        f"the longest prompt ({prompt_tokens} tokens) + budget.max_new_tokens {max_new_tokens} = "
        f"{prompt_tokens + max_new_tokens} tokens exceed the model's context (max_position_embeddings "
        f"{limit}): lower budget.max_new_tokens or shorten the prompts (task fewshot, system, "
        "instruction)"
    )


@check("context_length", "after_load")
def context_length(s: AfterLoad, rep: Report) -> None:
    """The longest of the task's prompts + budget.max_new_tokens within the model's context; the
    prompt length goes to `s.prompt_tokens` (the memory estimate reads it)."""
    s.prompt_tokens = longest_prompt_tokens(s.tokenizer, s.rows)
    try:
        check_context(s.model_config, s.prompt_tokens, s.cfg.budget.max_new_tokens)
    except VariantError as e:
        rep.errors.append(str(e))
        s.stop = True
