"""The machine a bench ran on and what else ran there: CPU seconds, load average, platform and
library versions; `median` of a bench's per-step numbers."""

from __future__ import annotations

import math
import os
import platform
import re
import resource
import statistics
from pathlib import Path
from typing import Any, Sequence


def cpu_seconds() -> float:
    """User + system CPU time of this process so far (all threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def loadavg_1m() -> float:
    """The 1-minute load average (NaN where the OS does not report it)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def median(xs: Sequence[float]) -> float:
    """Median of `xs` without None and NaN; NaN when none is left."""
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return float(statistics.median(xs)) if xs else float("nan")


def machine_info() -> dict[str, Any]:
    """Platform, Python, CPU model and flags (avx512_bf16), cores, memory, torch threads, CUDA device."""
    import torch

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", cpu, re.M)
        info["cpu"] = m.group(1).strip() if m else platform.processor()
        flags = re.search(r"^flags\s*:\s*(.+)$", cpu, re.M)
        info["avx512_bf16"] = bool(flags and "avx512_bf16" in flags.group(1).split())
        mem = re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(), re.M)
        info["mem_total_gb"] = round(int(mem.group(1)) / 2**20, 1) if mem else None
        info["loadavg_1m"] = os.getloadavg()[0]
    except OSError:
        info["cpu"] = platform.processor()
    return info


def versions() -> dict[str, str | None]:
    """Installed versions of zoo and the libraries a bench depends on (None: not installed)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for p in ("variant-zoo", "torch", "transformers", "accelerate", "peft", "trl"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out
