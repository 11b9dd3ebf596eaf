"""How zoo calls a causal LM, shared by generation (zoo.backends.generate.hf), the training forward
(zoo.step.logprobs) and the critic: position ids from the attention mask (C10), which arguments the
forward takes (`logits_to_keep`, the KV-cache argument), and a prompt's KV cache expanded to the rows
that share it. Shapes: B rows, L tokens, n rows sharing U distinct prompts."""

from __future__ import annotations

import inspect
from typing import Any, Callable

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


# --------------------------------------------------------------------------- the output head's input
def _contiguous_input(module: nn.Module, args: tuple) -> tuple:
    return (args[0].contiguous(), *args[1:]) if args and isinstance(args[0], Tensor) else args


def contiguous_head_input(model: nn.Module) -> None:
    """Make the output head (`get_output_embeddings()`) take a contiguous input.

    transformers' `logits_to_keep` slices the hidden states [n, L, d] to [n, k, d] (a view with the row
    stride of L positions) before the head; `F.linear` on that view runs as a batched matmul against the
    head's [V, d] weight expanded to n copies, measured 2.5-5x slower on CPU than the same product on a
    contiguous copy (SmolLM2's 49,152 x 576 head, torch 2.13, docs/results/performance-step.md "The
    output head"). The copy costs n x k x d floats; the logits agree up to float rounding (another kernel's summation order).
    A model without output embeddings is left alone."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and not getattr(head, "_zoo_contiguous_input", False):
        head.register_forward_pre_hook(_contiguous_input)
        head._zoo_contiguous_input = True


# --------------------------------------------------------------------------- a prefix shared by every prompt
# Chat prompts with fixed worked examples share their first ~115 tokens (system turn and shots; the main job's
# prompts are 145 tokens long): that prefix runs once for all rows, and only the rest of each prompt runs per
# distinct prompt. Below this length a second forward call costs more than it saves (our choice, not tuned).
SHARED_PREFIX_MIN = 16


def shared_prefix_len(ids: Tensor, mask: Tensor) -> int:
    """K: how many tokens every row of left-padded prompts [n, P] starts with after its pads, at most the
    shortest row's length - 1 (each row keeps a token of its own); 0 below `SHARED_PREFIX_MIN`, for one row,
    or when the mask is not left padding ([0 .. 0, 1 .. 1] per row).
    ids [[p, 5, 6, 7], [5, 6, 8, 9]], mask [[0, 1, 1, 1], [1, 1, 1, 1]] share [5, 6] -> K = 2 (with a minimum of 2)."""
    n, P = ids.shape
    lengths = mask.long().sum(1)  # [n]
    m = int(lengths.min()) if n else 0
    if n < 2 or m - 1 < SHARED_PREFIX_MIN:
        return 0
    starts = P - lengths  # [n] first real column
    cols = torch.arange(P, device=ids.device)
    if not bool(((cols[None, :] >= starts[:, None]) == mask.bool()).all()):
        return 0  # not left padding
    toks = ids.gather(1, starts[:, None] + cols[None, : m - 1])  # [n, m-1] the first m-1 real tokens
    same = (toks == toks[:1]).all(0).long()  # [m-1]
    K = int(same.cumprod(0).sum())
    return K if K >= SHARED_PREFIX_MIN else 0


def prefix_first(mask: Tensor, K: int) -> Tensor:
    """Column order [n, P] that moves each left-padded row's first K real tokens to the front:
    [pads, prefix, rest] -> [prefix, pads, rest]; apply as `x.gather(1, order)` to ids, mask and position ids
    alike. Positions follow the tokens, so the model sees the same sequence, pads in the middle.
    mask [[0, 1, 1, 1]], K 2 -> order [[1, 2, 0, 3]]."""
    n, P = mask.shape
    pads = P - mask.long().sum(1, keepdim=True)  # [n, 1]
    j = torch.arange(P, device=mask.device)[None, :].expand(n, P)  # [n, P]
    return torch.where(j < K, pads + j, torch.where(j < K + pads, j - K, j))  # [n, P]


def prompt_cache(
    model: nn.Module, ids: Tensor, att: Tensor, pos: Tensor, K: int, *, read: Callable[[Any], Tensor] | None = None
) -> tuple[Any, Tensor | None]:
    """Run U prompt rows [U, P] once -> (their KV cache, or None when the model returns none; with `read`
    (e.g. `lambda out: out.logits`) what it reads off the output at the last column [U, 1, ...], else None).
    With K > 0 the rows are in `prefix_first` order and share their first K columns: those run once, as one
    row, and their cache is expanded to the U rows before the rest runs (K < P when `read`). Gradients flow
    to the prefix."""
    U, P = ids.shape
    keep = {"logits_to_keep": 1} if accepts_logits_to_keep(model) else {}
    extra: dict = {}
    if K > 0:
        out = model(input_ids=ids[:1, :K], attention_mask=att[:1, :K], position_ids=pos[:1, :K], use_cache=True, **keep)
        cache = expandable_cache(out)
        del out
        if cache is None:
            return None, None
        cache.batch_select_indices(torch.zeros(U, dtype=torch.long, device=ids.device))  # [1, ...] -> [U, ...]
        if K == P:
            return cache, None
        extra = {cache_arg(model): cache}
    out = model(
        input_ids=ids[:, K:], attention_mask=att, position_ids=pos[:, K:], use_cache=True, **keep, **extra
    )  # the cache covers columns [0, K), the mask all P
    last = read(out)[:, -1:] if read is not None else None  # [U, 1, ...]
    return expandable_cache(out), last


def shared_prompt_forward(
    model: nn.Module, ids: Tensor, att: Tensor, pos: Tensor, T: int, read: Callable[[Any], Tensor]
) -> tuple[Tensor, Tensor | None] | None:
    """The forward of rows [n, L] = prompt (P = L - T columns, left-padded) + completion (T), with each
    distinct prompt run once (a prefix every prompt shares, `shared_prefix_len`, once for all), its KV
    cache expanded to the n rows and the completions continued from it. Returns (head [n, 1, ...]: `read`
    of the output at the last prompt position, which predicts completion token 0; tail [n, T-1, ...]: `read`
    of the continuation over completion tokens 0..T-2, None when T == 1), or None when no prompt repeats
    and no prefix is shared, or the model returned no cache (the caller runs the plain forward). The values
    equal the plain forward's up to float rounding; gradients flow through the shared prompt.
    read: `lambda out: out.logits` for a causal LM, `lambda out: out.last_hidden_state` for a backbone."""
    n, L = ids.shape
    P = L - T
    K = shared_prefix_len(ids[:, :P], att[:, :P])  # tokens every prompt starts with (system turn, shots)
    if K:
        order = torch.cat([prefix_first(att[:, :P], K), torch.arange(P, L, device=ids.device).expand(n, T)], dim=1)
        ids, att, pos = (x.gather(1, order) for x in (ids, att, pos))  # [n, L] prefix first, pads after it
    key = torch.cat([ids[:, :P], att[:, :P].to(ids.dtype)], dim=1)  # [n, 2P]
    uniq, inverse = torch.unique(key, dim=0, return_inverse=True)  # [U, 2P], [n]
    U = uniq.shape[0]
    if U == n and not K:
        return None
    first = one_row_each(inverse, U)  # [U] a row of each distinct prompt
    cache, head = prompt_cache(model, ids[first, :P], att[first, :P], pos[first, :P], K, read=read)
    if cache is None:
        return None
    if T == 1:
        return head[inverse], None
    cache.batch_select_indices(inverse)  # [U, ...] -> [n, ...] per layer; gradients flow back to the prompt
    out = model(
        input_ids=ids[:, P : L - 1],
        attention_mask=att[:, : L - 1],
        position_ids=pos[:, P : L - 1],
        use_cache=True,
        **{cache_arg(model): cache},
    )
    del cache
    return head[inverse], read(out)  # [n, 1, ...], [n, T-1, ...]
