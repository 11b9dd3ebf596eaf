"""Peak memory of the process: a window reset per phase or run, and its high-water mark in MB."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import torch


def reset_peak_memory(device: torch.device) -> bool:
    """Start a new peak-memory window: CUDA's max-allocated counter on a GPU; on CPU, freed heap pages
    are first handed back (`malloc_trim`) and the process's resident-set high-water mark (VmHWM) is
    reset by writing 5 to /proc/self/clear_refs (Linux >= 4.0). Used per phase by `zoo bench` and per
    run by the trainer, so arms run one after another in one process (`zoo ablate`) report their own
    peak. Returns False where the CPU mark cannot be reset (it then stays the process's lifetime peak)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return True
    _malloc_trim()  # so the window starts from live memory, not from what the allocator kept
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    """glibc keeps freed heap memory resident; `malloc_trim(0)` releases it (no-op elsewhere)."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC: Any = None


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory (MB) since the last `reset_peak_memory`: CUDA max allocated on a GPU, else the
    process's VmHWM (its lifetime peak `ru_maxrss` where /proc is unavailable)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
