"""Exclusive leases on run folders and study indexes, safe on a folder shared by several hosts.

    with locked(run_dir / LOCK_NAME, what=str(run_dir)):   # LockedError when someone else holds it
        ...

A lease is a marker file created atomically (O_CREAT|O_EXCL) that records its owner (host, pid, process
start) and is renewed by a heartbeat thread every `ttl / 4` seconds. A lease whose marker stops
changing for `ttl` seconds has lost its holder and is taken over: a process that died on another host
(a cluster node) frees its arms after `ttl`; one that died on this host is recognised at once by its
pid. `flock`/`fcntl` locks are not used: they do not reach across hosts on NFS.

The lease is `filelock.SoftFileLease` (filelock >= 4.3, tested with 4.3.1; also a dependency of torch and
huggingface_hub): it renews the marker from a thread, measures expiry on the contender's own
monotonic clock (so clock skew between hosts cannot expire a live lease) and takes a stale marker
over atomically. Leases are reentrant within a thread (`zoo ablate` holds an arm's lease while
`trainer.train` takes it again) and exclusive between threads and processes.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import filelock

from zoo.config.variant import VariantError

log = logging.getLogger(__name__)

#: seconds a lease survives without a heartbeat (every holder of one path must use the same value)
DEFAULT_TTL = float(os.environ.get("ZOO_LOCK_TTL", "60"))
#: the lease file in a run folder
LOCK_NAME = ".zoo.lock"
#: seconds after which a lease file that names no owner is taken for corrupt (not one being written)
GRACE = 2.0


class LockedError(VariantError):
    """The lease is held by another live process or thread; the message names the holder."""


def _warn_lost(c: filelock.LeaseCompromise) -> None:
    log.warning("lost the lease %s (%s): another process took it over", c.lock_file, c.reason)


def _lease(path: Path, ttl: float) -> filelock.SoftFileLease:
    # one instance per path (is_singleton): reentrant in a thread, exclusive between threads (thread-local)
    return filelock.SoftFileLease(
        str(path), lease_duration=ttl, heartbeat_interval=ttl / 4, is_singleton=True, on_compromise=_warn_lost
    )


def _record(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def holder(path: Path) -> str:
    """Who holds the lease at `path`: "pid 123 on host h, renewed 4s ago" (or why it is unknown)."""
    try:
        text, st = Path(path).read_text(errors="replace"), os.stat(path)
    except OSError:
        return "no one (the lease was just released)"
    rec, age = _record(text), max(0.0, time.time() - st.st_mtime)
    if "pid" not in rec or "host" not in rec:
        return f"an unknown owner (the lease file names no pid and host), written {age:.0f}s ago"
    return f"pid {rec['pid']} on host {rec['host']}, renewed {age:.0f}s ago"


def _this_host() -> set[str]:
    names = {socket.gethostname()}
    try:  # filelock writes the host with its pid namespace in a container ("vm?pidns-...")
        from filelock._identity import host_name

        names.add(host_name())
    except ImportError:  # another filelock layout: the plain host name still matches
        pass
    return names


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, as another user's process
        return True
    return True


def unowned(path: Path, ttl: float) -> str | None:
    """Why the marker at `path` holds no one, so it may be removed at once, else None.

    A lease this module writes (`mode=lease` with a token, pid and host) is left to filelock's rules
    (a dead pid on this host is taken over at once, another host's after `ttl`). Anything else under
    the name is not a live lease: a record naming a pid of this host that does not run, a file that
    names no pid and host (corrupt, truncated, hand-written) once it is `GRACE` seconds old (a lease
    being written is complete within microseconds), or another host's non-lease record older than `ttl`."""
    try:
        text, st = Path(path).read_text(errors="replace"), os.stat(path)
    except OSError:
        return None
    rec, age = _record(text), time.time() - st.st_mtime
    if rec.get("mode") == "lease" and rec.get("token") and text.endswith("\n"):
        return None
    pid, host = rec.get("pid", "").strip(), rec.get("host", "").strip()
    if not (pid.isdigit() and int(pid) >= 1 and host):
        return "it names no owner (no pid and host: corrupt or not written by zoo)" if age >= GRACE else None
    if host in _this_host():
        return None if _pid_alive(int(pid)) else f"pid {pid} does not run on this host ({host})"
    return f"it is not a zoo lease and host {host} has not renewed it for {age:.0f}s" if age >= ttl else None


def _clear_unowned(path: Path, ttl: float) -> None:
    why = unowned(path, ttl)
    if why is None:
        return
    try:
        if unowned(path, ttl) is None:  # replaced meanwhile (a contender took it over): keep it
            return
        os.unlink(path)
    except FileNotFoundError:
        return
    log.warning("%s: removed a stale lease file: %s", path, why)


def acquire(path: Path, ttl: float = DEFAULT_TTL, wait: float = 0.0) -> filelock.SoftFileLease | None:
    """Take the lease at `path` (its folder is created), waiting up to `wait` seconds for a live
    holder to release it; None when a live holder keeps it.

    A marker that looks older than `ttl` (its mtime) is watched for up to 1.5 x ttl and taken over if
    it does not change in `ttl`; a live holder's heartbeat changes it, and then this returns None.
    Release the lease with `.release()`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _clear_unowned(path, ttl)
    lease = _lease(path, ttl)
    try:
        lease.acquire(timeout=wait, poll_interval=min(0.05, ttl / 8))
        return lease
    except filelock.Timeout:
        pass
    try:
        age = time.time() - os.stat(path).st_mtime
    except OSError:
        age = ttl  # released meanwhile: try once more below
    if age < ttl:
        return None
    try:
        lease.acquire(timeout=1.5 * ttl, poll_interval=ttl / 8)
        return lease
    except filelock.Timeout:
        return None


@contextmanager
def locked(path: Path, what: str, ttl: float = DEFAULT_TTL, wait: float = 0.0) -> Iterator[filelock.SoftFileLease]:
    """Hold the lease at `path` for the block (see `acquire`). Raises LockedError naming `what` and the holder."""
    lease = acquire(path, ttl, wait)
    if lease is None:
        raise LockedError(
            f"{what} is in use by {holder(Path(path))} (lease {path}; a lease whose holder "
            f"died expires after {ttl:.0f}s)"
        )
    try:
        yield lease
    finally:
        lease.release()
