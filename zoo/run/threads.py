"""CPU threads and the OpenMP wait policy of a zoo process, chosen before torch is imported.

Torch's OpenMP threads spin at every barrier by default. With one other CPU-bound process on a
2-core machine, two spinning threads made a 64x576 @ 576x1536 forward+backward loop 9x slower
(9.4 s against 1.0 s on one thread); with `OMP_WAIT_POLICY=PASSIVE` (idle threads sleep) it took
1.3 s (docs/results/performance-threads.md). Both settings are read once, when torch loads its OpenMP runtime, so
`apply` must run before the first `import torch`: the `zoo` command does it first thing
(zoo/cli/__init__.py), the bench workers and the Ray tasks get it through their environment.

    choice = apply()          # idempotent; sets os.environ, takes a lease, returns the Choice
    choice.line()             # 'threads: 1 (auto: 2 usable CPUs ... - 1 held by other zoo processes) ...'
    record()                  # for provenance: {"threads", "wait_policy", "source", "why"}

The choice, first rule that applies:
  1. `--threads N` on the command line;
  2. `OMP_NUM_THREADS` set by the user (not the value a zoo parent process chose, see ENV_CHOSEN);
  3. auto: the CPUs this process may use (`os.sched_getaffinity`, capped by the cgroup v2 `cpu.max`
     or v1 `cpu.cfs_quota_us` quota) minus the threads other live zoo processes of this user hold;
     under torchrun at most usable // LOCAL_WORLD_SIZE; never fewer than 1.
`OMP_WAIT_POLICY`: the user's if set (a value a zoo parent set, ENV_POLICY_CHOSEN, is not the
user's); else PASSIVE on a busy machine and OpenMP's default on an idle one (zoo.run.wait_policy).

Leases: each process that applies a choice writes `<pid>.lease` ("pid threads start_time") into a
per-user folder under the temp dir (`$ZOO_THREADS_DIR` overrides), removed at exit; a lease whose
pid is dead, or now belongs to another process (a different start time), is ignored and removed.

Stdlib only: importing this module never imports torch.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from zoo.run.cpus import _read, affinity_cpus, cgroup_cpus, parse_cfs, parse_cpu_max, usable_cpus
from zoo.run.wait_policy import DEFAULT, PASSIVE, choose_policy

__all__ = ["affinity_cpus", "cgroup_cpus", "parse_cfs", "parse_cpu_max", "usable_cpus", "PASSIVE", "DEFAULT"]

ENV_CHOSEN = "ZOO_THREADS_CHOSEN"  # the OMP_NUM_THREADS value zoo itself set: a child re-chooses
ENV_POLICY_CHOSEN = "ZOO_WAIT_POLICY_CHOSEN"  # the OMP_WAIT_POLICY zoo itself set: not the user's
ENV_DIR = "ZOO_THREADS_DIR"
_UNSET = object()  # choose() called without a load: PASSIVE, as before the policy went by load


@dataclass(frozen=True)
class Choice:
    """One process's threads and wait policy. source: "--threads", "OMP_NUM_THREADS" or "auto";
    policy_source: "user" (OMP_WAIT_POLICY was set) or "zoo default"; why: the numbers behind it."""

    threads: int
    wait_policy: str
    source: str
    why: str
    policy_source: str = "zoo default"

    def line(self) -> str:
        """The one console line a run prints about it."""
        return (
            f"threads: {self.threads} ({self.source}: {self.why}); "
            + (f"OMP_WAIT_POLICY={self.wait_policy}" if self.wait_policy != DEFAULT else "OMP_WAIT_POLICY unset")
            + f" ({self.policy_source})"
        )

    def record(self) -> dict[str, object]:
        return asdict(self)


# --------------------------------------------------------------------------- the choice (pure)


def threads_from_argv(argv: Sequence[str]) -> int | None:
    """The value of `--threads N` / `--threads=N` in argv (a positive int), else None."""
    for i, a in enumerate(argv):
        if a == "--threads":
            v = argv[i + 1] if i + 1 < len(argv) else ""
        elif a.startswith("--threads="):
            v = a.removeprefix("--threads=")
        else:
            continue
        try:
            n = int(v)
        except ValueError:
            return None  # the command's own parser reports it
        return n if n >= 1 else None
    return None


def _env_threads(env: Mapping[str, str]) -> int | None:
    """The user's OMP_NUM_THREADS (first level of "4,2"), or None when unset, invalid, or zoo's own."""
    raw = env.get("OMP_NUM_THREADS", "").strip()
    if not raw or raw == env.get(ENV_CHOSEN):
        return None
    try:
        n = int(raw.split(",")[0])
    except ValueError:
        return None
    return n if n >= 1 else None


def beyond_cpus(threads: int, usable: int, key: str) -> str:
    """The warning a `why` carries when the threads asked for are more than the usable CPUs ("" if not)."""
    if threads <= usable:
        return ""
    return (
        f"; warning: {key} {threads} is more than the {usable} usable CPUs: the threads beyond them wait on "
        f"each other and can make the run several times slower; use {usable} or fewer"
    )


def choose(
    *,
    affinity: int,
    quota: float | None,
    held: Mapping[int, int],
    env: Mapping[str, str],
    argv_threads: int | None = None,
    load: float | None | object = _UNSET,
) -> Choice:
    """The threads and wait policy for a process (module docstring's rules).

    affinity: CPUs in the affinity mask; quota: cgroup quota in CPUs or None; held: {pid: threads}
    of the other live zoo processes; env: the environment; argv_threads: `--threads`; load: the
    1-minute load average for the wait policy by load (None: unknown, so PASSIVE), or not given (PASSIVE)."""
    user_policy = env.get("OMP_WAIT_POLICY", "").strip()
    if user_policy and user_policy == env.get(ENV_POLICY_CHOSEN):
        user_policy = ""  # set by a zoo parent process, not by the user
    try:
        local = int(env.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local = 1
    policy, policy_source = (user_policy.upper(), "user") if user_policy else (PASSIVE, "zoo default")
    if not user_policy and load is not _UNSET:  # by load (zoo.run.wait_policy); callers without it: PASSIVE
        policy, why_policy = choose_policy(load, sum(held.values()), local)
        policy_source = f"zoo default, {why_policy}"
    usable = usable_cpus(affinity, quota)
    if argv_threads is not None:
        why = f"--threads {argv_threads}" + beyond_cpus(argv_threads, usable, "--threads")
        return Choice(argv_threads, policy, "--threads", why, policy_source)
    env_n = _env_threads(env)
    if env_n is not None:
        why = f"OMP_NUM_THREADS={env['OMP_NUM_THREADS']}" + beyond_cpus(env_n, usable, "OMP_NUM_THREADS")
        return Choice(env_n, policy, "OMP_NUM_THREADS", why, policy_source)
    taken = sum(held.values())
    why = (
        f"{usable} usable CPUs (affinity {affinity}, cgroup quota "
        f"{'none' if quota is None else f'{quota:g}'}) - {taken} held by other zoo processes"
    )
    n = usable - taken
    if local > 1:
        n = min(n, usable // local)
        why += f", at most {usable} // {local} torchrun ranks"
    return Choice(max(1, n), policy, "auto", why, policy_source)


# --------------------------------------------------------------------------- leases


def lease_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The per-user folder of leases: $ZOO_THREADS_DIR, else <tmp>/zoo-threads-<uid>."""
    if env.get(ENV_DIR):
        return Path(env[ENV_DIR])
    return Path(tempfile.gettempdir()) / f"zoo-threads-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if unknown."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def parse_lease(text: str) -> tuple[int, int, str | None] | None:
    """ "pid threads start_time" -> (pid, threads, start_time); None when malformed."""
    parts = text.split()
    try:
        pid, n = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None
    return pid, n, (parts[2] if len(parts) > 2 and parts[2] != "-" else None)


def live_leases(
    d: Path, self_pid: int, alive: Callable[[int], bool] = pid_alive, started: Callable[[int], str | None] = start_time
) -> dict[int, int]:
    """{pid: threads} of the other live processes' leases in `d`; stale or malformed ones are removed."""
    out: dict[int, int] = {}
    for f in sorted(d.glob("*.lease")):
        parsed = parse_lease(_read(str(f)) or "")
        if parsed is not None and parsed[0] == self_pid:
            continue
        if (
            parsed is None
            or not alive(parsed[0])
            or (parsed[2] is not None and started(parsed[0]) not in (None, parsed[2]))
        ):
            try:
                f.unlink()
            except OSError:
                pass
            continue
        out[parsed[0]] = parsed[1]
    return out


class _Locked:
    """An exclusive flock on `d/.lock` while leases are read and written (None if the folder is unusable)."""

    def __init__(self, d: Path):
        self.d, self.fd = d, None

    def __enter__(self) -> "_Locked":
        try:
            self.d.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.fd = os.open(self.d / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:
            self.fd = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock


# --------------------------------------------------------------------------- this process

_CHOICE: Choice | None = None
_LEASE: Path | None = None


def apply(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Choice:
    """Choose (module docstring), set OMP_WAIT_POLICY and OMP_NUM_THREADS in `env` (os.environ), and
    hold a lease for the threads until exit. Once per process: later calls return the first choice.
    When torch is already imported the environment comes too late: the choice is still recorded, and
    torch is set to its thread count with `torch.set_num_threads`."""
    global _CHOICE, _LEASE
    if _CHOICE is not None:
        return _CHOICE
    env = os.environ if env is None else env
    argv = sys.argv[1:] if argv is None else argv
    d, pid = lease_dir(env), os.getpid()
    quota = cgroup_cpus(_read("/proc/self/cgroup") or "")
    with _Locked(d) as lock:
        held = live_leases(d, pid) if lock.fd is not None else {}
        choice = choose(
            affinity=affinity_cpus(),
            quota=quota,
            held=held,
            env=env,
            argv_threads=threads_from_argv(argv),
            load=_load(),
        )
        if lock.fd is not None:
            lease = d / f"{pid}.lease"
            try:
                lease.write_text(f"{pid} {choice.threads} {start_time(pid) or '-'}\n")
                _LEASE = lease
                atexit.register(release)
            except OSError:
                pass
    if choice.wait_policy == DEFAULT:  # OpenMP's own spin-then-sleep: leave the variable unset
        env.pop("OMP_WAIT_POLICY", None)
        env.pop(ENV_POLICY_CHOSEN, None)
    else:
        env["OMP_WAIT_POLICY"] = choice.wait_policy
    if choice.policy_source != "user" and choice.wait_policy != DEFAULT:
        env[ENV_POLICY_CHOSEN] = choice.wait_policy
    if choice.source != "OMP_NUM_THREADS":
        env["OMP_NUM_THREADS"] = str(choice.threads)
        env[ENV_CHOSEN] = str(choice.threads)
    if "torch" in sys.modules:  # too late for the environment; the thread count can still be set
        sys.modules["torch"].set_num_threads(choice.threads)
        choice = Choice(
            choice.threads,
            choice.wait_policy,
            choice.source,
            choice.why + " (torch was already imported: wait policy not applied)",
            choice.policy_source,
        )
    _CHOICE = choice
    return choice


def _load(samples: int = 5) -> float | None:
    """Other threads runnable on the machine now: the median over `samples` reads, 10 ms apart, of
    /proc/loadavg's runnable count minus this thread (a process that just finished, such as an install,
    weighs nothing, unlike in a load average); without /proc the 1-minute load average; None if neither."""
    import statistics
    import time

    counts = []
    for i in range(samples):
        text = _read("/proc/loadavg")
        try:
            counts.append(int(text.split()[3].split("/")[0]) - 1 if text else -1)
        except (IndexError, ValueError):
            counts.append(-1)
        if i + 1 < samples:
            time.sleep(0.01)
    if min(counts) >= 0:
        return float(statistics.median(counts))
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def release() -> None:
    """Remove this process's lease (at exit, and before exec'ing another program in this pid)."""
    global _LEASE
    if _LEASE is not None:
        try:
            _LEASE.unlink()
        except OSError:
            pass
        _LEASE = None


def current() -> Choice | None:
    """This process's choice, None before `apply`."""
    return _CHOICE


def adopt(threads: int, source: str, why: str) -> Choice:
    """Record a choice made elsewhere (a Ray task's CPUs) without a lease: torch is set to `threads`
    (when imported) and the wait policy is whatever the environment says."""
    global _CHOICE
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    policy = os.environ.get("OMP_WAIT_POLICY", "").strip().upper()
    _CHOICE = Choice(threads, policy or "unset", source, why, "environment")
    return _CHOICE


def record() -> dict[str, object]:
    """What provenance records: this process's choice; else (a bench worker, zoo used as a library)
    what the environment and torch say, with source "zoo parent process" where the thread count is
    the one a zoo parent chose, else "not chosen by zoo"."""
    if _CHOICE is not None:
        return _CHOICE.record()
    torch = sys.modules.get("torch")
    env_n = os.environ.get("OMP_NUM_THREADS")
    n = torch.get_num_threads() if torch is not None else env_n
    inherited = env_n is not None and env_n == os.environ.get(ENV_CHOSEN)
    policy = os.environ.get("OMP_WAIT_POLICY", "").strip().upper()
    return {
        "threads": n,
        "wait_policy": policy or "unset",
        "source": "zoo parent process" if inherited else "not chosen by zoo",
        "why": f"OMP_NUM_THREADS={env_n}" if env_n else "torch's default",
        "policy_source": "environment",
    }
