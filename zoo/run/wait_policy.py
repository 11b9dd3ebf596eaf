"""The OpenMP wait policy zoo chooses when the user did not set `OMP_WAIT_POLICY` (stdlib only).

Measured on this project's 2-core Xeon (docs/results/performance-threads.md, "Does PASSIVE cost anything on an idle
machine?"): beside one other CPU-bound process, spinning threads made a step up to 9x slower, and
PASSIVE (idle threads sleep) fixes it; on an idle machine PASSIVE made a `zoo bench` step at the main
job's size 1.6x slower (12.0 s against 7.4 s) and a 32 x 64 tiny step 2x slower. So the choice goes
by load, read once before torch loads:

- PASSIVE when another zoo process holds threads (its lease), when this is one of several torchrun
  ranks on the machine, when other threads are runnable right now (`others`: the runnable count of
  /proc/loadavg minus this one, the median of 5 samples over 40 ms; where there is no /proc, the
  1-minute load average), at least BUSY; or when that is unknown;
- otherwise OpenMP's default (threads spin a while at a barrier, then sleep: `OMP_WAIT_POLICY` left
  unset), the fast setting for a machine this process has to itself.

A process that starts on an idle machine keeps its policy if another job starts later (OpenMP reads it
once); the other job, if it is a zoo process, sees this one's lease and runs PASSIVE. Set
`OMP_WAIT_POLICY` yourself to override (PASSIVE on a shared laptop, ACTIVE for a benchmark).
"""

from __future__ import annotations

PASSIVE = "PASSIVE"
DEFAULT = "default"  # OMP_WAIT_POLICY unset: the OpenMP runtime's own spin-then-sleep
BUSY = 0.5  # other runnable threads (or load average) at or above which another job is taken to run


def choose_policy(load: float | None, held: int, local_ranks: int) -> tuple[str, str]:
    """(policy, why) for a process whose user set no wait policy.

    load: other threads runnable on the machine before this process started working (None: unknown);
    held: threads other live zoo processes hold; local_ranks: torchrun ranks on this machine (1 alone)."""
    if held > 0:
        return PASSIVE, f"busy: {held} threads held by other zoo processes"
    if local_ranks > 1:
        return PASSIVE, f"busy: {local_ranks} torchrun ranks share the CPUs"
    if load is None:
        return PASSIVE, "load unknown"
    if load >= BUSY:
        return PASSIVE, f"busy: {load:g} other runnable threads"
    return DEFAULT, f"idle: {load:g} other runnable threads, no other zoo process; spinning is faster here"
