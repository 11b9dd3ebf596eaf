"""The CPUs a process may use: the affinity mask capped by the cgroup (v2 `cpu.max`, v1 `cpu.cfs_quota_us`)
quota, for zoo.run.threads. Stdlib only: importing this module never imports torch."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 `cpu.max` ("200000 100000" -> 2.0 CPUs; "max 100000" -> None, no quota)."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota: str, period: str) -> float | None:
    """cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` ("-1" quota -> None, no quota)."""
    try:
        q, p = int(quota.strip()), int(period.strip())
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def cgroup_cpus(
    proc_cgroup: str, read: Callable[[str], str | None] = _read, root: str = "/sys/fs/cgroup"
) -> float | None:
    """The tightest CPU quota (in CPUs) on this process's cgroup and its ancestors, v2 or v1, or None.

    proc_cgroup: the text of /proc/self/cgroup ("0::/a/b" for v2, "4:cpu,cpuacct:/a" for v1).
    read: path -> text or None (tests pass a dict's get)."""
    limits: list[float] = []
    for line in proc_cgroup.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not path:
            continue
        parts = [p for p in path.split("/") if p]
        paths = ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]  # the cgroup, then each ancestor
        if hier == "0" and controllers == "":
            for mount in (root, f"{root}/unified"):
                for p in paths:
                    text = read(f"{mount}/{p}/cpu.max".replace("//", "/"))
                    q = parse_cpu_max(text) if text else None
                    if q:
                        limits.append(q)
        elif "cpu" in controllers.split(","):
            for mount in (f"{root}/cpu", f"{root}/cpu,cpuacct", f"{root}/cpuacct,cpu"):
                for p in paths:
                    base = f"{mount}/{p}".rstrip("/")
                    quota, period = read(f"{base}/cpu.cfs_quota_us"), read(f"{base}/cpu.cfs_period_us")
                    q = parse_cfs(quota, period) if quota and period else None
                    if q:
                        limits.append(q)
    return min(limits) if limits else None


def affinity_cpus() -> int:
    """How many CPUs the scheduler lets this process run on (os.cpu_count where affinity is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus(affinity: int, quota: float | None) -> int:
    """min(affinity, floor(quota)), at least 1: a 1.5-CPU quota runs one thread without throttling."""
    n = affinity if quota is None else min(affinity, math.floor(quota))
    return max(1, n)
