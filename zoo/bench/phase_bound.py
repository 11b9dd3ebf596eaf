"""The step near its bound (issue 30 section 4): per phase of a bench, the least time the work the
variant ran could take on this machine, next to the measured time.

    generate   prefills: forward FLOPs / matmul rate, + the decode bound (`zoo.bench.decode`:
               max(decode FLOPs / matmul rate, weights and KV bytes read / copy bandwidth))
    forward    old / reference log-probs, critic values: max(forward FLOPs / matmul rate, weight
               bytes read / copy bandwidth)
    train      training forwards and backwards (`bound.backward_flops`: a frozen weight's backward
               ~1x its forward, a trainable one's 2x), the critic's, a no-grad forward where a
               selection ran one, the recomputed forward under activation checkpointing:
               max(FLOPs / matmul rate, weight bytes read / copy bandwidth), + AdamW's bytes
               (`bound.adamw_bytes`) per applied optimizer step / copy bandwidth
    critic     the critic's share of train: max(its forward and backward FLOPs / matmul rate, its
               weight bytes read / copy bandwidth)
    step       the sum of generate, forward and train (score and advantage run no model: no bound)

"GB moved" (`bytes`) is what the bound's memory side counts: for forward, train and critic, every
forward call reads its model's weights once (`work_bytes`: `weight_bytes` of the role, at the dtype
autocast reads them in; the recomputed forward of activation checkpointing once more); train adds
AdamW's bytes. A backward's reads are left out (layer 0 needs no input gradient, a weight gradient
needs no weight), so the count stays a lower bound, as the FLOPs are (`zoo.bench.bound`).

A generator that runs its own model copy (vLLM) makes no decode steps the probe sees: generate's and
the step's bound are NaN (printed "-").

FLOPs come from the forwards the probe saw (`zoo.bench.probe`, `work`), positions as run (padding
included, a group's shared prompt once), each model's own dims (`bound.matmul_dims`). The rates are the
bench's (`zoo.bench.decode.measure_decode`: a square matmul in the step's dtype, a 256 MiB copy), so
the bound assumes every matmul of the step runs at the square matmul's rate, which small and skinny
matmuls (LoRA's rank-16 adapters, one decode row) do not reach. distance = measured / bound (>= 1).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from zoo.bench.bound import adamw_bytes, backward_flops, forward_flops
from zoo.bench.machine import median

NAN = float("nan")
BOUNDED = ("generate", "forward", "train", "critic")


def work_flops(
    work: Mapping[str, Mapping[str, float]], dims: Mapping[str, Mapping[str, float]], recompute: bool = False
) -> float:
    """FLOPs of one phase's forwards, `work` = {"ROLE/fwd" or "ROLE/fwdbwd": {"positions",
    "head_positions", "attended"}} as the probe records them, `dims` = {ROLE: matmul_dims}; a "fwdbwd"
    entry counts its forward, its backward and, with `recompute` (activation checkpointing), the
    forward again."""
    total = 0.0
    for key, w in work.items():
        role, kind = key.split("/")
        d, args = dims[role], (w["positions"], w["head_positions"], w["attended"])
        f = forward_flops(d, *args)
        total += f
        if kind == "fwdbwd":
            total += backward_flops(d, *args) + (f if recompute else 0.0)
    return total


def step_flops(
    work: Mapping[str, Mapping[str, Mapping[str, float]]],
    dims: Mapping[str, Mapping[str, float]],
    recompute: bool = False,
) -> dict[str, float]:
    """{generate (prefills only), forward, train (critic included), critic} FLOPs of one step's `work`."""
    out = {p: work_flops(work.get(p, {}), dims, recompute and p != "forward") for p in BOUNDED}
    out["train"] += out["critic"]  # the critic phase sits inside train
    return out


def work_bytes(
    work: Mapping[str, Mapping[str, float]], dims: Mapping[str, Mapping[str, float]], recompute: bool = False
) -> float:
    """Weight bytes one phase's forwards read at least: each forward call (`calls` in `work`, as the
    probe counts them) reads its role's `weight_bytes` (from `dims`) once, a "fwdbwd" call once more
    with `recompute` (activation checkpointing runs its forward again). 0 without either count."""
    total = 0.0
    for key, w in work.items():
        role, kind = key.split("/")
        reads = 2.0 if recompute and kind == "fwdbwd" else 1.0
        total += reads * w.get("calls", 0.0) * dims[role].get("weight_bytes", 0.0)
    return total


def phase_bounds(
    seconds: Mapping[str, float],
    works: Sequence[Mapping[str, Any]],
    dims: Mapping[str, Mapping[str, float]],
    decode: Mapping[str, Any],
    optimizer_steps: float,
    trainable: float,
    recompute: bool = False,
) -> dict[str, Any]:
    """Per phase {"seconds", "flops", "bytes", "bound_s", "distance"} (medians of the steps' FLOPs and
    bytes), and "step". seconds: the measured median seconds per phase and "step"; works: each step's
    probe `work`; dims: each role's `matmul_dims` with its `weight_bytes`; decode: `decode_summary`
    (its rates and decode bound); optimizer_steps: applied per step; trainable: trainable parameters
    of policy and critic (fp32 AdamW state)."""
    rate, bw = decode["matmul_flops_per_s"], decode["copy_bytes_per_s"]
    per_step = [step_flops(w, dims, recompute) for w in works]
    flops = {p: median([f[p] for f in per_step]) for p in BOUNDED}
    reads = {
        p: median([work_bytes(w.get(p, {}), dims, recompute and p != "forward") for w in works])
        for p in ("forward", "train", "critic")
    }
    reads["train"] += reads["critic"]  # the critic phase sits inside train
    opt = adamw_bytes(trainable) * optimizer_steps

    def roof(p: str) -> float:  # the phase's model work: compute or memory, whichever takes longer
        return max(flops[p] / rate, reads[p] / bw)

    rows = {
        "generate": (
            flops["generate"] + decode.get("flops", NAN),
            decode.get("bytes", NAN),
            flops["generate"] / rate + decode.get("bound_s", NAN),
        ),
        "forward": (flops["forward"], reads["forward"], roof("forward")),
        "train": (flops["train"], reads["train"] + opt, roof("train") + opt / bw),
        "critic": (flops["critic"], reads["critic"], roof("critic")),
    }
    out: dict[str, Any] = {"matmul_flops_per_s": rate, "copy_bytes_per_s": bw, "dtype": decode.get("dtype")}
    for p, (f, b, bound) in rows.items():
        if p == "critic" and not f > 0:
            continue
        out[p] = _row(seconds.get(p, NAN), f, b, bound)
    parts = [out[p] for p in ("generate", "forward", "train")]
    out["step"] = _row(
        seconds.get("step", NAN),
        sum(r["flops"] for r in parts),
        sum(r["bytes"] for r in parts),
        sum(r["bound_s"] for r in parts),
    )
    return out


def _row(seconds: float, flops: float, bytes_: float, bound_s: float) -> dict[str, float]:
    return {
        "seconds": seconds,
        "flops": flops,
        "bytes": bytes_,
        "bound_s": bound_s,
        "distance": seconds / bound_s if bound_s > 0 else NAN,
    }
