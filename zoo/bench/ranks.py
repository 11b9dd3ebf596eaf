"""`zoo bench --strategy ddp|fsdp --nproc N`: the bench on every rank of a launcher's processes,
gathered on rank 0 (zoo/cli/bench.py starts `torchrun` through zoo/cli/launch.py).

Every rank runs `run_bench` with `training.strategy` set (`zoo.run.trainer.setup` joins the process
group and wraps the models: zoo/backends/train/strategy.py) and measures its own process: the peak resident set
(CPU) or CUDA max allocated, and the breakdown (zoo/bench/memory.py) from the tensors it holds, so
under FSDP2 weights, gradients and AdamW state count this rank's shards (`DTensor.to_local()`).
Rank 0 gets every rank's numbers (`dist.all_gather_object`):

    res = bench_ranks(BenchSpec(variant="grpo", strategy="fsdp", ...))   # on every rank
    res["ranks"][r]["state_mb"]   # weights + gradients + optimizer state held by rank r (MB)
    res["state_sum_mb"]           # their sum over ranks (fsdp: the full model's; ddp: N copies)
"""

from __future__ import annotations

from typing import Any, Callable

from zoo.bench.run import run_bench
from zoo.bench.spec import BenchSpec

#: the breakdown keys of one rank's row (MB), as in `memory_breakdown`
MEMORY_KEYS = ("weights_mb", "gradients_mb", "optimizer_mb", "runtime_mb", "activations_mb", "peak_mb")


def rank_row(rank: int, res: dict[str, Any]) -> dict[str, Any]:
    """One rank's row from its `run_bench` result: rank, step seconds (median: step_s and train_s are
    the trainer's `time/*` metrics, means over ranks; wall_s this process's own step wall time), CPU
    seconds per step, the memory breakdown (MB) and state_mb = weights + gradients + optimizer state."""
    m = res["memory"]
    row = {
        "rank": rank,
        "step_s": res["step"]["seconds"],
        "wall_s": res["step"].get("wall_s"),
        "cpu_s": res["step"].get("cpu_s"),
        "train_s": res["phases"]["train"]["seconds"],
        **{k: m[k] for k in MEMORY_KEYS},
    }
    row["state_mb"] = m["weights_mb"] + m["gradients_mb"] + m["optimizer_mb"]
    return row


def gather_rows(rows: list[dict[str, Any]], strategy: str) -> dict[str, Any]:
    """The per-rank summary from every rank's `rank_row` (in rank order): the rows, the sum over ranks
    of state_mb, the largest peak and the slowest median step wall time (a step ends when the last rank
    ends; step_s where a row has no wall_s)."""
    return {
        "strategy": strategy,
        "world_size": len(rows),
        "ranks": rows,
        "state_sum_mb": sum(r["state_mb"] for r in rows),
        "peak_max_mb": max(r["peak_mb"] for r in rows),
        "step_max_s": max(r.get("wall_s") or r["step_s"] for r in rows),
    }


def bench_ranks(spec: BenchSpec, *, on_step: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """`run_bench(spec)` on this rank, then every rank's row gathered (a collective: call it on every
    rank). Returns rank 0's full result with `distributed` = `gather_rows(...)` added (the same on
    every rank). Raises ValueError when `spec.strategy` is ddp/fsdp and no launcher started this
    process (WORLD_SIZE unset)."""
    import os

    from zoo.core import dist

    if spec.strategy in ("ddp", "fsdp") and "WORLD_SIZE" not in os.environ:
        raise ValueError(
            f"--strategy {spec.strategy} runs under a launcher: add --nproc N "
            "(or start it with torchrun --standalone --nproc_per_node N -m zoo.cli bench ...)"
        )
    res = run_bench(spec, on_step=on_step)
    rows = dist.all_gather_object(rank_row(dist.rank(), res))
    res["distributed"] = gather_rows(rows, spec.strategy)
    return res
