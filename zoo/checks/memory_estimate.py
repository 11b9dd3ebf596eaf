"""Refuse a rollout that cannot fit in memory before it allocates anything.

`zoo run --set budget.group_size=1000000` would otherwise try `ids.repeat_interleave` over 8e6 rows
(9.6 GB) and then a KV cache of terabytes. The estimate counts the three allocations that grow with
the budget (orders of magnitude, not exact bytes):

- token rows: every completion of the step as int64 `[N, P + T]` ids, masks and completion ids
  (N = prompts_per_step x group_size; P prompt tokens, T = max_new_tokens);
- the KV cache of one `generate` call: 2 (K and V) x layers x kv_heads x head_dim x (P + T) per row,
  for the rows of one generate call (the trainer's: sampling.batch_size, default max(group_size, GENERATE_BATCH));
- logits: the sampler's `[rows, V]` float32 scores (x3: logits, processed scores, probabilities),
  or the update's `[micro_batch, P + T, V]` float32 logits and log-softmax, whichever is larger.

Model weights, optimizer state and activations are not counted (they do not grow with the budget).
"""

from __future__ import annotations

from typing import Any

from zoo.config.variant import VariantError

HEADROOM = 0.9  # refuse above this fraction of the available memory


def rollout_memory(
    *,
    prompts_per_step: int,
    group_size: int,
    micro_batch: int,
    generate_rows: int,
    prompt_tokens: int,
    max_new_tokens: int,
    layers: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    kv_bytes: int,
) -> dict[str, int]:
    """Estimated bytes of one rollout step: {"token_rows", "kv_cache", "logits", "total"} (module doc).
    `generate_rows` and `micro_batch` count at most the step's prompts_per_step x group_size rows
    (`budget.micro_batch: 10000000` with 8 completions allocates for 8).

    Raises nothing; every argument is a positive count (`kv_bytes`: bytes per cached value, 4 for
    float32, 2 under bf16/fp16)."""
    n = prompts_per_step * group_size
    seq = prompt_tokens + max_new_tokens
    rows = min(generate_rows, n)  # a generate call or micro-batch never holds more rows than the step has
    micro_batch = min(micro_batch, n)
    token_rows = 3 * n * seq * 8
    kv_cache = 2 * layers * kv_heads * head_dim * seq * rows * kv_bytes
    logits = max(3 * rows * vocab * 4, 2 * micro_batch * seq * vocab * 4)
    return {"token_rows": token_rows, "kv_cache": kv_cache, "logits": logits, "total": token_rows + kv_cache + logits}


def available_memory(device: Any) -> int:
    """Bytes free for new tensors on `device`: CUDA's free memory, else the host's available RAM."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import psutil

    return int(psutil.virtual_memory().available)


def model_shape(config: Any) -> dict[str, int]:
    """layers, kv_heads, head_dim, vocab of a transformers config (Llama/Qwen/GPT-style names)."""
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    return {
        "layers": int(getattr(config, "num_hidden_layers", 1) or 1),
        "kv_heads": int(getattr(config, "num_key_value_heads", None) or heads),
        "head_dim": int(getattr(config, "head_dim", None) or max(1, hidden // heads)),
        "vocab": int(getattr(config, "vocab_size", 1) or 1),
    }


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n < 1e12 else f"{n / 1e12:.1f} TB"


def check_rollout_fits(
    cfg: Any, group_size: int, generate_rows: int, config: Any, prompt_tokens: int, kv_bytes: int, available: int
) -> dict[str, int]:
    """Raise VariantError when the step's rollout (`rollout_memory`) needs more than HEADROOM x
    `available` bytes; the message gives the estimate and the knobs to lower, the largest first
    (budget.group_size / prompts_per_step / max_new_tokens / micro_batch, sampling.batch_size). Returns the estimate.

    cfg: the RunConfig (its budget); group_size: the G in use (budget or variant); generate_rows:
    rows per generate call; config: the model's transformers config; prompt_tokens: the longest
    prompt in tokens."""
    b = cfg.budget
    est = rollout_memory(
        prompts_per_step=b.prompts_per_step,
        group_size=group_size,
        micro_batch=b.micro_batch,
        generate_rows=generate_rows,
        prompt_tokens=prompt_tokens,
        max_new_tokens=b.max_new_tokens,
        kv_bytes=kv_bytes,
        **model_shape(config),
    )
    if est["total"] <= HEADROOM * available:
        return est
    gen_knob = "budget.group_size" if generate_rows <= group_size else "sampling.batch_size"  # rows per generate call
    sampler_logits = 3 * generate_rows >= 2 * b.micro_batch * (prompt_tokens + b.max_new_tokens)
    names = {"token_rows": "token rows", "kv_cache": "KV cache", "logits": "logits"}
    knobs = {
        "token_rows": "budget.group_size / budget.prompts_per_step",
        "kv_cache": f"{gen_knob} / budget.max_new_tokens",
        "logits": gen_knob if sampler_logits else "budget.micro_batch",
    }
    parts = sorted(("token_rows", "kv_cache", "logits"), key=lambda k: -est[k])
    raise VariantError(
        f"budget: {b.prompts_per_step} prompts x group_size {group_size} = {b.prompts_per_step * group_size} "
        f"completions of up to {prompt_tokens} + {b.max_new_tokens} tokens need about {_gb(est['total'])} for the "
        f"rollout ({', '.join(f'{names[k]} {_gb(est[k])}' for k in parts)}), more than the "
        f"{_gb(available)} available: lower {knobs[parts[0]]}"
    )
