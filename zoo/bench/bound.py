"""The decode bound of `zoo bench`: how fast generation could run on this machine, from the work a decode
step does and two rates measured at bench time (a roofline, Williams et al. 2009, "Roofline: an
insightful visual performance model", CACM 52(4); applied to LLM decode as in Pope et al. 2022,
arXiv:2211.05102, section 2).

Per decode step s (one forward of `rows_s` rows, each one new token attending to `ctx_s` positions):

    FLOPs_s = 2 * params * rows_s + 4 * layers * q_dim * ctx_s * rows_s
              (every weight one multiply-add per row, the embedding counted as the tied LM head;
               attention: Q K^T and A V, 2 * q_dim * ctx each, per layer and row)
    bytes_s = weight_bytes + 2 * layers * kv_dim * ctx_s * rows_s * kv_elem_bytes
              (every weight read once, at the decode dtype's size under autocast, and the K and V
               cache of every row)

    bound seconds = max(sum_s FLOPs_s / matmul rate, sum_s bytes_s / copy bandwidth)

q_dim = heads * head_dim, kv_dim = kv_heads * head_dim. The matmul rate is that of a square matmul in the
decode's dtype; the copy bandwidth counts a copy's bytes read plus written (the STREAM convention). The
bound is a lower bound on the time: the measured generate seconds over it is the distance.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn


def model_dims(model: nn.Module, read_dtype: torch.dtype | None = None) -> dict[str, float]:
    """{params, weight_bytes, layers, q_dim, kv_dim} of a transformers causal LM (under a peft wrapper:
    of the whole module, adapters included). Parameters shared by several modules (a tied LM head)
    count once. read_dtype: the dtype the decode's matmuls read the weights in, when narrower than
    theirs (bf16 under bf16 autocast: the least a step must read is a bf16 copy, zoo.models.cast_cache);
    default their own. Raises ValueError when the config lacks the layer or head counts."""
    from zoo.models.forward import inner_lm

    cfg = inner_lm(model).config
    try:
        layers, heads, hidden = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
    except AttributeError as e:
        raise ValueError(f"model config {type(cfg).__name__} has no {e.name}: cannot count decode work") from e
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    ps = list(model.parameters())  # unique parameters (tied weights once)
    return {
        "params": float(sum(p.numel() for p in ps)),
        "weight_bytes": weight_bytes(model, read_dtype),
        "layers": float(layers),
        "q_dim": float(heads * head_dim),
        "kv_dim": float(kv_heads * head_dim),
    }


def weight_bytes(model: nn.Module, read_dtype: torch.dtype | None = None) -> float:
    """Bytes of `model`'s parameters (tied ones once), each at the narrower of its own dtype and
    `read_dtype` (the dtype its matmuls read it in under autocast): what one forward reads at least."""
    return float(sum(p.numel() * min(p.element_size(), (read_dtype or p.dtype).itemsize) for p in model.parameters()))


def decode_work(
    dims: dict[str, float], steps: float, rows: float, rows_ctx: float, kv_elem_bytes: float
) -> dict[str, float]:
    """The FLOPs and bytes of `steps` decode steps (module docstring), from their sums:
    rows = sum_s rows_s, rows_ctx = sum_s rows_s * ctx_s. Returns {"flops", "bytes"}."""
    flops = 2.0 * dims["params"] * rows + 4.0 * dims["layers"] * dims["q_dim"] * rows_ctx
    bytes_ = steps * dims["weight_bytes"] + 2.0 * dims["layers"] * dims["kv_dim"] * rows_ctx * kv_elem_bytes
    return {"flops": flops, "bytes": bytes_}


def decode_bound(flops: float, bytes_: float, matmul_flops_per_s: float, copy_bytes_per_s: float) -> dict[str, Any]:
    """max(flops / matmul rate, bytes / copy bandwidth): {"seconds", "compute_s", "memory_s", "limit"}
    with limit "compute" or "memory", whichever term is larger. Raises ValueError for a rate <= 0."""
    if not (matmul_flops_per_s > 0 and copy_bytes_per_s > 0):
        raise ValueError(f"rates must be > 0, got matmul {matmul_flops_per_s}, copy {copy_bytes_per_s}")
    compute_s, memory_s = flops / matmul_flops_per_s, bytes_ / copy_bytes_per_s
    return {
        "seconds": max(compute_s, memory_s),
        "compute_s": compute_s,
        "memory_s": memory_s,
        "limit": "compute" if compute_s >= memory_s else "memory",
    }


def _timed(fn, seconds: float) -> tuple[int, float]:
    fn()  # warm-up (allocation, kernel choice)
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n, dt


def matmul_rate(
    dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", n: int = 1024, seconds: float = 0.3
) -> float:
    """FLOP/s of an [n, n] @ [n, n] matmul (2 n^3 FLOPs) in `dtype` on `device`, repeated for `seconds`."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    k, dt = _timed(lambda: (a @ b, sync()), seconds)
    return 2.0 * n**3 * k / dt


def copy_bandwidth(device: str | torch.device = "cpu", mb: int = 256, seconds: float = 0.3) -> float:
    """Bytes/s of `dst.copy_(src)` over `mb` MiB buffers, bytes read plus written, repeated for `seconds`."""
    src = torch.empty(mb << 20, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    k, dt = _timed(lambda: (dst.copy_(src), sync()), seconds)
    return 2.0 * src.numel() * k / dt


# --------------------------------------------------------------------------- the whole step's FLOPs
#
# Per forward of a model over `positions` positions (padding included: it is computed), `head_positions`
# of them reaching the LM head (`logits_to_keep`), and `attended` = sum over positions of the positions
# each attends to (causal: a position attends to the cache and to itself and the positions before it):
#
#     forward  = 2 * body * positions + 2 * head * head_positions + 4 * layers * q_dim * attended
#     backward = 2 * (body_frozen + 2 * body_trainable) * positions
#                + 2 * (1 or 2) * head * head_positions + 8 * layers * q_dim * attended
#
# body = the weights of every nn.Linear but the LM head (LoRA's A and B included), head = the LM head's
# (the tied embedding's; the input embedding is a lookup, no FLOPs). A backward computes the input's
# gradient (one multiply-add per weight and position, as the forward) and, for a trainable weight, the
# weight's gradient (one more): a frozen linear's backward is ~1x its forward, a trainable one's 2x
# (Kaplan et al. 2020, arXiv:2001.08361, section 2.1: 2N forward, 4N backward per token, all trainable).
# Attention has no weights: its backward is dQ, dK, dA, dV, 2x its forward. Layer 0 needs no input
# gradient and norms, activations and softmax are left out (a few percent at SmolLM2's size), so the
# count is a lower bound on the work.


def _config(model: nn.Module) -> Any:
    for m in model.modules():  # the causal LM's config, or the critic backbone's
        cfg = getattr(m, "config", None)
        if hasattr(cfg, "num_hidden_layers"):
            return cfg
    raise ValueError(f"{type(model).__name__} has no config with num_hidden_layers: cannot count its FLOPs")


def matmul_dims(model: nn.Module) -> dict[str, float]:
    """{body, body_trainable, head, head_trainable (1.0 or 0.0), layers, q_dim} of a transformers model
    (a causal LM, under peft or not, or zoo's critic: a backbone without LM head and a value head),
    counting each nn.Linear weight once (tied weights once). Raises ValueError without a config."""
    from zoo.models.forward import inner_lm

    cfg = _config(model)
    get_head = getattr(inner_lm(model), "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    hw = getattr(head, "weight", None)
    seen, body, body_t = {id(hw)}, 0, 0
    for m in model.modules():
        w = getattr(m, "weight", None)
        if isinstance(m, nn.Linear) and id(w) not in seen:
            seen.add(id(w))
            body += w.numel()
            body_t += w.numel() if w.requires_grad else 0
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return {
        "body": float(body),
        "body_trainable": float(body_t),
        "head": float(hw.numel()) if hw is not None else 0.0,
        "head_trainable": float(bool(hw is not None and hw.requires_grad)),
        "layers": float(cfg.num_hidden_layers),
        "q_dim": float(heads * head_dim),
    }


def forward_flops(d: dict[str, float], positions: float, head_positions: float, attended: float) -> float:
    """FLOPs of forwards over `positions` positions (block comment above), `d` from `matmul_dims`."""
    return 2.0 * d["body"] * positions + 2.0 * d["head"] * head_positions + 4.0 * d["layers"] * d["q_dim"] * attended


def backward_flops(d: dict[str, float], positions: float, head_positions: float, attended: float) -> float:
    """FLOPs of the backwards of those forwards: frozen weights input gradients only (1x their forward),
    trainable ones also weight gradients (2x), attention 2x (block comment above)."""
    frozen = d["body"] - d["body_trainable"]
    return (
        2.0 * (frozen + 2.0 * d["body_trainable"]) * positions
        + 2.0 * (1.0 + d["head_trainable"]) * d["head"] * head_positions
        + 8.0 * d["layers"] * d["q_dim"] * attended
    )


def adamw_bytes(trainable: float, elem_bytes: float = 4.0) -> float:
    """Bytes one AdamW step moves at least: it reads parameter, gradient and both moments and writes
    parameter and both moments, 7 tensors of `trainable` elements of `elem_bytes` each."""
    return 7.0 * elem_bytes * trainable
