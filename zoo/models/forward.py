"""How zoo calls a causal LM, shared by generation (zoo.backends.generate.hf), the training forward
(zoo.step.logprobs) and the critic: position ids from the attention mask (C10), which arguments the
forward takes (`logits_to_keep`, the KV-cache argument), and a prompt's KV cache expanded to the rows
that share it. Shapes: B rows, L tokens, n rows sharing U distinct prompts."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor, nn


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Position ids [B, L] long from an attention mask [B, L] (left or right padding).

    Real tokens count from 0; padded slots get 1 (any fixed value works, 1 matches TRL/verl).
    C10: [[0,0,1,1,1],[1,1,1,1,1]] -> [[1,1,0,1,2],[0,1,2,3,4]].
    Raises ValueError unless the mask is 2-D.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be [B, L], got shape {tuple(attention_mask.shape)}")
    mask = attention_mask.long()
    pos = mask.cumsum(-1) - 1  # [B, L]
    return pos.masked_fill(mask == 0, 1)


def inner_lm(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (the one whose generate() runs), also under a
    DistributedDataParallel wrapper."""
    model = getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def accepts_logits_to_keep(model: nn.Module) -> bool:
    """Whether the forward of `model` (under a peft wrapper: the inner model's) takes `logits_to_keep`."""
    try:
        return "logits_to_keep" in inspect.signature(inner_lm(model).forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def cache_arg(model: nn.Module) -> str | None:
    """The forward's KV-cache argument: "cache" (transformers >= 5.2x), "past_key_values", or None."""
    try:
        params = inspect.signature(inner_lm(model).forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return None
    return next((a for a in ("cache", "past_key_values") if a in params), None)


def own_positions(model: nn.Module) -> bool:
    """Whether the model computes its own position ids from its inputs and must not be given 1-D ones:
    Qwen2-VL's 3-D M-RoPE (`get_rope_index` from `mm_token_type_ids`, `image_grid_thw` and the
    attention mask, which handles left padding). Other models take `position_ids_from_mask` (C10)."""
    lm = inner_lm(model)
    return hasattr(lm, "get_rope_index") or hasattr(getattr(lm, "model", None), "get_rope_index")


def one_row_each(inverse: Tensor, U: int) -> Tensor:
    """[U] index of the first row of each of U distinct values, given `torch.unique(..., return_inverse)`'s
    inverse [n]."""
    n = inverse.shape[0]
    return torch.full((U,), n, dtype=torch.long, device=inverse.device).scatter_reduce(
        0, inverse, torch.arange(n, device=inverse.device), reduce="amin"
    )


def expandable_cache(out: Any) -> Any:
    """The KV cache of a forward's output if it can be expanded to more rows (`batch_select_indices`), else None."""
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    return cache if cache is not None and hasattr(cache, "batch_select_indices") else None
