"""Memory probes of a bench: the process's resident set (CPU) or CUDA allocation now, and the
breakdown of the peak into weights (policy, reference, critic), the reward model, gradients, optimizer
state, runtime and activations.

Weights, gradients and optimizer state are counted from the tensors this process holds: an FSDP2
parameter (a DTensor) and its AdamW moments count their local shard (`DTensor.to_local()`), so
under `training.strategy: fsdp` the numbers are per rank and sum over ranks to the full tensors'."""

from __future__ import annotations

import re
import resource
from pathlib import Path
from typing import Any, Iterator


def _proc_status_kb(key: str) -> float | None:
    try:
        m = re.search(rf"^{key}:\s+(\d+)\s+kB", Path("/proc/self/status").read_text(), re.M)
    except OSError:
        return None
    return float(m.group(1)) if m else None


def rss_mb() -> float:
    """Current resident set size (MB); the peak so far where /proc is unavailable."""
    kb = _proc_status_kb("VmRSS")
    return kb / 1024 if kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_mb(device) -> float:
    """Memory in use now (MB): CUDA bytes allocated on a GPU `device`, else the resident set."""
    import torch

    return torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else rss_mb()


def local_tensor(t: Any) -> Any:
    """The part of `t` this process holds: a DTensor's local shard (`to_local()`, FSDP2's sharded
    parameters, gradients and optimizer moments), any other tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def local_bytes(t: Any) -> int:
    """Bytes of `t`'s local part (`local_tensor`): numel x element size of this process's shard."""
    t = local_tensor(t)
    return t.numel() * t.element_size()


def tensor_mb(tensors: Iterator[Any]) -> float:
    """MB held by `tensors` on this process (a DTensor counts its local shard), each storage counted
    once (shared ones by data pointer); None, empty and meta tensors count 0."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t is None or t.device.type == "meta":
            continue
        t = local_tensor(t)
        key = t.data_ptr()
        if key in seen or t.numel() == 0:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total / 2**20


def reward_model_mb(st: Any) -> float:
    """MB of the weights of the run's open reward-model sessions (rewards and gold rewards: any session
    holding a `model`, zoo.rewards.session)."""
    import torch

    from zoo.rewards.session import LiveReward

    models = [c.session.model for c, _ in getattr(st, "rewards", []) if isinstance(c, LiveReward)]
    models += [c.session.model for c in getattr(st, "gold", []) if isinstance(c, LiveReward)]

    def tensors():
        for m in models:
            if isinstance(m, torch.nn.Module):
                yield from m.parameters()
                yield from m.buffers()

    return tensor_mb(tensors())


def memory_breakdown(st: Any, runtime_mb: float, peak_mb: float) -> dict[str, float]:
    """weights (policy, reference, critic) / reward model / gradients / optimizer / runtime from the run's
    tensors (`st`: a `zoo.step.types.RunState`), activations = `peak_mb` - all of those (MB each). Gradients = one gradient per trainable
    parameter (its local shard under FSDP2). Under fsdp, weights are the shards held between phases;
    the layers' all-gathered copies during a forward/backward count as activations."""
    models = [st.models.policy]
    ref = st.reference
    if ref is not None and not ref.shares_policy:
        models.append(ref.model)
    if st.models.critic is not None:
        models.append(st.models.critic)

    def all_tensors():
        for m in models:
            yield from m.parameters()
            yield from m.buffers()

    weights = tensor_mb(all_tensors())
    trainable = [p for m in models for p in m.parameters() if p.requires_grad]
    grads = sum(local_bytes(p) for p in trainable) / 2**20
    opt_tensors = []
    for opt in (st.optimizer, st.critic_optimizer):
        if opt is None:
            continue
        for s in opt.state.values():
            opt_tensors += [v for v in s.values() if hasattr(v, "data_ptr")]
    optimizer = tensor_mb(iter(opt_tensors))
    rm = reward_model_mb(st)
    acts = peak_mb - runtime_mb - weights - rm - grads - optimizer
    return {
        "peak_mb": peak_mb,
        "runtime_mb": runtime_mb,
        "weights_mb": weights,
        "reward_model_mb": rm,
        "gradients_mb": grads,
        "optimizer_mb": optimizer,
        "activations_mb": acts,
    }
