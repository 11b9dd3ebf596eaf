"""The decode row of a bench: generation tokens/s and decode steps/s next to the machine's bound
(`zoo.bench.bound`), from the decode steps the probe counted (`zoo.bench.probe.Probe.decode_hook`)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from zoo.bench.bound import copy_bandwidth, decode_bound, decode_work, matmul_rate, model_dims
from zoo.bench.machine import median

#: autocast setting -> the dtype decode matmuls and the KV cache run in (none: the weights' own)
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def decode_summary(
    steps: Sequence[dict[str, Any]],
    gen_seconds: float,
    gen_tokens: float,
    dims: dict[str, float],
    dtype: torch.dtype,
    matmul_flops_per_s: float,
    copy_bytes_per_s: float,
) -> dict[str, Any]:
    """Per training step (medians over `steps`, each {"steps", "rows", "rows_ctx"} as the probe
    records): decode steps, rows per step, mean attended positions, generation tokens/s
    (gen_tokens / gen_seconds), decode steps/s, the work and the bound (`decode_work`, `decode_bound`)
    in bound steps/s and tokens/s, and distance = gen_seconds / bound seconds (>= 1; the generate
    phase's prefill and sampling count in gen_seconds, not in the bound). Without decode steps
    (a generator outside the policy module) every decode number is NaN."""
    n = median([s.get("steps", 0.0) for s in steps])
    rows = median([s.get("rows", 0.0) for s in steps])
    rows_ctx = median([s.get("rows_ctx", 0.0) for s in steps])
    nan = float("nan")
    out: dict[str, Any] = {
        "decode_steps": n,
        "rows_per_step": rows / n if n > 0 else nan,
        "ctx_mean": rows_ctx / rows if rows > 0 else nan,
        "dtype": str(dtype).removeprefix("torch."),
        "tokens_per_s": gen_tokens / gen_seconds if gen_seconds > 0 else nan,
        "steps_per_s": n / gen_seconds if gen_seconds > 0 and n > 0 else nan,
        "matmul_flops_per_s": matmul_flops_per_s,
        "copy_bytes_per_s": copy_bytes_per_s,
        "step_seconds": gen_seconds / n if n > 0 else nan,
    }
    if not n > 0:
        return out | {
            "flops": nan,
            "bytes": nan,
            "bound_s": nan,
            "bound_steps_per_s": nan,
            "bound_tokens_per_s": nan,
            "limit": None,
            "distance": nan,
        }
    elem = torch.empty((), dtype=dtype).element_size()
    work = decode_work(dims, n, rows, rows_ctx, elem)
    b = decode_bound(work["flops"], work["bytes"], matmul_flops_per_s, copy_bytes_per_s)
    return out | {
        "flops": work["flops"],
        "bytes": work["bytes"],
        "bound_s": b["seconds"],
        "limit": b["limit"],
        "bound_steps_per_s": n / b["seconds"],
        "bound_tokens_per_s": rows / b["seconds"],
        "bound_step_seconds": b["seconds"] / n,
        "distance": gen_seconds / b["seconds"],
    }


def measure_decode(
    model: torch.nn.Module,
    autocast: str,
    device: torch.device,
    steps: Sequence[dict[str, Any]],
    gen_seconds: float,
    gen_tokens: float,
) -> dict[str, Any]:
    """`decode_summary` for `model` run under `autocast` on `device`, with the matmul rate (in the
    decode's dtype) and the copy bandwidth measured now (about 0.6 s)."""
    dtype = AUTOCAST_DTYPES.get(autocast, next(model.parameters()).dtype)
    dims = model_dims(model, dtype)  # under autocast the weights are read as bf16/fp16 copies
    return decode_summary(
        steps, gen_seconds, gen_tokens, dims, dtype, matmul_rate(dtype, device), copy_bandwidth(device)
    )
