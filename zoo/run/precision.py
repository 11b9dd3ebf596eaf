"""`model_opts.autocast: auto`: pick bf16 where the hardware runs it natively, fp32 elsewhere.

    choice, reason = resolve_autocast("auto", torch.device("cpu"))   # ("bf16", "CPU flags ...")

Why: on a CPU without native bf16 matmul, torch emulates bf16 and a linear layer of SmolLM2's shape
runs at ~10 GFLOP/s against ~57 GFLOP/s in fp32 (environment.md), so bf16 autocast makes a run several
times slower; with AVX-512 BF16 or AMX it is ~1.7x faster (docs/results/performance.md).
`torch.backends.cpu.get_cpu_capability()` alone cannot tell: it says "AVX512" also on CPUs
without the bf16 instructions. The rule:

- CUDA: bf16 when `torch.cuda.is_bf16_supported()`, else fp32.
- CPU, Linux: bf16 when /proc/cpuinfo's x86 `flags` list `avx512_bf16` or `amx_bf16`, else fp32.
- CPU elsewhere (macOS, Windows, or no x86 flags line): bf16 only when oneDNN reports bf16 support
  (`torch.ops.mkldnn._is_mkldnn_bf16_supported()`) AND a short timed matmul probe finds bf16 at
  least `PROBE_MIN_SPEEDUP` x faster than fp32; the probe's result is cached per machine in
  `<zoo cache>/precision.json` (`$ZOO_CACHE`, default ~/.cache/variant-zoo).
- any other device: fp32.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

SETTINGS = ("auto", "none", "bf16", "fp16")
#: /proc/cpuinfo flags of CPUs whose bf16 matmul is native (oneDNN's avx512_core_bf16 / AMX kernels)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: the timed probe picks bf16 only when it is at least this much faster than fp32
PROBE_MIN_SPEEDUP = 1.1
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags() -> set[str] | None:
    """The x86 feature flags of /proc/cpuinfo's first `flags` line; None where there is no such line
    (not Linux, unreadable, or a non-x86 CPU whose line is called `Features`)."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return set(value.split())
    return None


def cpu_capability() -> str:
    """torch's CPU kernel capability ("AVX2", "AVX512", "DEFAULT", ...); recorded, not decisive."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "unknown"


def mkldnn_bf16_supported() -> bool:
    """oneDNN's own answer to 'can this CPU run bf16 kernels' (False where torch lacks the query)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def probe_bf16_speedup(n: int = 512, reps: int = 5) -> float:
    """fp32 time / bf16-autocast time of an [n, n] x [n, n] matmul, best of `reps` each (~0.1 s)."""
    a, b = torch.randn(n, n), torch.randn(n, n)

    def best(bf16: bool) -> float:
        times = []
        for _ in range(reps + 1):  # the first call warms up the kernel
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                a @ b
            times.append(time.perf_counter() - t0)
        return min(times[1:])

    return best(False) / max(best(True), 1e-9)


def _cache_file() -> Path:
    from zoo.models import cache_root

    return cache_root() / "precision.json"


def _machine_key() -> str:
    return "|".join(
        (
            platform.node(),
            platform.system(),
            platform.machine(),
            platform.processor(),
            str(os.cpu_count()),
            torch.__version__,
        )
    )


def cached_bf16_speedup() -> float:
    """`probe_bf16_speedup()`, measured once per machine (and torch version) and cached on disk."""
    path, key = _cache_file(), _machine_key()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    entry = data.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("bf16_speedup"), (int, float)):
        return float(entry["bf16_speedup"])
    speedup = probe_bf16_speedup()
    data[key] = {"bf16_speedup": speedup, "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # an unwritable cache only means probing again next time
    return speedup


def _resolve_cpu() -> tuple[str, str]:
    cap = cpu_capability()
    flags = cpu_flags()
    if flags is not None:
        found = [f for f in BF16_FLAGS if f in flags]
        if found:
            return "bf16", f"CPU has native bf16 matmul ({', '.join(found)} in /proc/cpuinfo; torch capability {cap})"
        return "none", (
            f"CPU lacks {' and '.join(BF16_FLAGS)} in /proc/cpuinfo (torch capability {cap}): "
            "bf16 would be emulated, slower than fp32"
        )
    if not mkldnn_bf16_supported():
        return "none", f"oneDNN reports no bf16 support on this CPU (torch capability {cap})"
    speedup = cached_bf16_speedup()
    if speedup >= PROBE_MIN_SPEEDUP:
        return "bf16", f"timed probe: bf16 matmul {speedup:.1f}x faster than fp32 here (torch capability {cap})"
    return "none", (
        f"timed probe: bf16 matmul only {speedup:.2f}x the speed of fp32 here, below "
        f"{PROBE_MIN_SPEEDUP}x (torch capability {cap})"
    )


def resolve_autocast(setting: str, device: torch.device | str) -> tuple[str, str]:
    """The autocast a run uses ("none" | "bf16" | "fp16") and why, for `model_opts.autocast`.

    `setting`: "auto" | "none" | "bf16" | "fp16"; anything but "auto" is returned as it is.
    `device`: where the forward passes run. Raises ValueError for an unknown setting."""
    if setting not in SETTINGS:
        raise ValueError(f"model_opts.autocast {setting!r}: use one of {', '.join(SETTINGS)}")
    if setting != "auto":
        return setting, f"model_opts.autocast: {setting} (as configured)"
    dev = torch.device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        if torch.cuda.is_bf16_supported():
            return "bf16", f"CUDA device {name} supports bf16"
        return "none", f"CUDA device {name} does not support bf16"
    if dev.type == "cpu":
        return _resolve_cpu()
    return "none", f"device {dev.type}: auto picks fp32 (set model_opts.autocast: bf16 to override)"


def describe(choice: str, reason: str) -> dict[str, Any]:
    """The provenance record of a resolved autocast: {"autocast", "reason", "cpu_capability"}."""
    return {"autocast": choice, "reason": reason, "cpu_capability": cpu_capability()}
