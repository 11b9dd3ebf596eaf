# Feeds docs/results/performance-threads.md, "Threads on a busy machine".
"""OpenMP spin on a busy machine: the 64x576 @ 576x1536 forward+backward loop, timed in a fresh process
per setting (the wait policy and thread count only take effect when set before torch is imported).

    python bench/omp_spin.py                 # idle-ish, then with one CPU-bound process pinned to CPU 1
    python bench/omp_spin.py --iters 150 --reps 3 --no-busy

Prints one row per setting: median seconds over --reps runs of --iters iterations (the settings take
turns), and the median 1-minute load average (os.getloadavg) read before each run, so a figure taken on a shared machine says how busy it was.
Numbers are printed, never asserted. Linux only for the busy part (`taskset`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import sys, time, torch
iters = int(sys.argv[1])
torch.manual_seed(0)
x = torch.randn(64, 576, requires_grad=True)
w = torch.randn(576, 1536, requires_grad=True)
for _ in range(5):
    (x @ w).sum().backward()
t0 = time.perf_counter()
for _ in range(iters):
    (x @ w).sum().backward()
print(f"{time.perf_counter() - t0:.4f} {torch.get_num_threads()}")
"""

SETTINGS = [
    ("2 threads, policy unset", "2", None),
    ("1 thread, policy unset", "1", None),
    ("2 threads, PASSIVE", "2", "PASSIVE"),
    ("1 thread, PASSIVE", "1", "PASSIVE"),
]


def one(threads: str, policy: str | None, iters: int) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    env["OMP_NUM_THREADS"] = threads
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(iters)], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), int(out[1])


def table(title: str, iters: int, reps: int) -> None:
    """One row per setting; the settings take turns within each repetition, so a load that drifts
    (a shared machine) reaches them alike."""
    print(f"\n{title} ({iters} iterations, median of {reps}, settings interleaved)")
    print(f"{'setting':<26} {'seconds':>8} {'torch threads':>14} {'load 1m':>8}")
    secs: dict[str, list[float]] = {name: [] for name, _, _ in SETTINGS}
    loads: dict[str, list[float]] = {name: [] for name, _, _ in SETTINGS}
    n: dict[str, int] = {}
    for _ in range(reps):
        for name, threads, policy in SETTINGS:
            loads[name].append(os.getloadavg()[0])
            s, n[name] = one(threads, policy, iters)
            secs[name].append(s)
    for name, _, _ in SETTINGS:
        print(
            f"{name:<26} {statistics.median(secs[name]):8.2f} {n[name]:14d} {statistics.median(loads[name]):8.2f}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-busy", action="store_true", help="skip the run beside a CPU-bound process")
    a = ap.parse_args()
    print(f"cpus: affinity {len(os.sched_getaffinity(0))}, os.cpu_count {os.cpu_count()}")
    table("idle-ish", a.iters, a.reps)
    if a.no_busy:
        return
    hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)
        table("busy: one CPU-bound process pinned to CPU 1", a.iters, a.reps)
    finally:
        hog.kill()
        hog.wait()


if __name__ == "__main__":
    main()
