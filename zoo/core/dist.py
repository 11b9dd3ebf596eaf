"""Data-parallel helpers: joining the process group and the small collectives the step's counts,
normalizers, controllers and metrics need. One process: every function is the identity.

Gradients are reduced by the training strategy (zoo/backends/train/strategy.py: DDP or FSDP2), with the loss
scaled by the world size so that they are *summed* over ranks: every aggregation already divides by
the optimizer step's totals over all ranks (`zoo.step.update.step_counts`), which makes a 2-rank
step equal a 1-rank step over the same rows (case C2 across ranks).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as td


def init_from_env() -> bool:
    """Join the process group a launcher describes in the environment (`torchrun`, or `accelerate
    launch --multi_gpu`, both set WORLD_SIZE/RANK/MASTER_ADDR): nccl with CUDA, gloo on CPU; also a group
    of one under a launcher (`torchrun --nproc_per_node 1`: FSDP2 needs a process group). A no-op
    without a launcher or when already initialised. Returns whether this process is one of several."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if not td.is_available() or td.is_initialized() or world < 1 or world == 1 and "MASTER_ADDR" not in os.environ:
        return is_distributed()
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0") or 0))
        td.init_process_group("nccl")
    else:
        td.init_process_group("gloo")
    return is_distributed()


def is_distributed() -> bool:
    return td.is_available() and td.is_initialized() and td.get_world_size() > 1


def rank() -> int:
    return td.get_rank() if is_distributed() else 0


def world_size() -> int:
    return td.get_world_size() if is_distributed() else 1


def _comm_device() -> torch.device:
    """NCCL reduces CUDA tensors only; gloo reduces CPU tensors."""
    if td.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum of `x` over ranks (a new tensor on x's device; `x` is unchanged)."""
    if not is_distributed():
        return x
    y = x.to(_comm_device(), copy=True)
    td.all_reduce(y, op=td.ReduceOp.SUM)
    return y.to(x.device)


def per_rank(value: float) -> list[float]:
    """Every rank's `value`, in rank order (on every rank)."""
    if not is_distributed():
        return [float(value)]
    v = torch.zeros(world_size(), dtype=torch.float64)
    v[rank()] = float(value)
    return all_reduce_sum(v).tolist()


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's picklable `obj`, in rank order (on every rank)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    td.all_gather_object(out, obj)
    return out


def all_reduce_mean_dict(metrics: dict[str, float]) -> dict[str, float]:
    """Mean of each scalar metric over the ranks that logged it (a rank whose step had nothing to
    train on logs fewer keys)."""
    if not is_distributed():
        return metrics
    keys = sorted(set().union(*all_gather_object(sorted(metrics))))
    t = torch.tensor([[float(metrics.get(k, 0.0)), float(k in metrics)] for k in keys], dtype=torch.float64)
    t = all_reduce_sum(t)
    return {k: float(t[i, 0]) / float(t[i, 1]) for i, k in enumerate(keys)}
