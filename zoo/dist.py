"""Data-parallel helpers. One process: every function is the identity.

Gradients are *summed* over ranks (not averaged as DDP does), because every aggregation already
divides by the optimizer step's totals over all ranks (`engine.step_counts`). That makes a 2-rank
step equal a 1-rank step over the same rows (case C2 across ranks).
"""
from __future__ import annotations

import torch
import torch.distributed as td


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


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum `.grad` over ranks in place, one flat buffer per call. Params without a grad count as 0."""
    if not is_distributed():
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    td.all_reduce(flat, op=td.ReduceOp.SUM)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset : offset + n].view_as(g).clone()
        offset += n


def all_reduce_mean_dict(metrics: dict[str, float]) -> dict[str, float]:
    """Mean of each scalar metric over ranks (same keys on every rank)."""
    if not is_distributed():
        return metrics
    keys = sorted(metrics)
    t = all_reduce_sum(torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64))
    return {k: float(v) / world_size() for k, v in zip(keys, t.tolist())}
