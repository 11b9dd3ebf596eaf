"""Exclusive leases on run folders and study indexes, safe on a folder shared by several hosts (issue 11, item 2).

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


class LockedError(VariantError):
    """The lease is held by another live process or thread; the message names the holder."""


def _warn_lost(c: filelock.LeaseCompromise) -> None:
    log.warning("lost the lease %s (%s): another process took it over", c.lock_file, c.reason)


def _lease(path: Path, ttl: float) -> filelock.SoftFileLease:
    # one instance per path (is_singleton): reentrant in a thread, exclusive between threads (thread-local)
    return filelock.SoftFileLease(str(path), lease_duration=ttl, heartbeat_interval=ttl / 4, is_singleton=True,
                                  on_compromise=_warn_lost)


def holder(path: Path) -> str:
    """Who holds the lease at `path`: "pid 123 on host h, renewed 4s ago" (or why it is unknown)."""
    try:
        text, st = Path(path).read_text(errors="replace"), os.stat(path)
    except OSError:
        return "no one (the lease was just released)"
    rec = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return (f"pid {rec.get('pid', '?')} on host {rec.get('host', '?')}, renewed "
            f"{max(0.0, time.time() - st.st_mtime):.0f}s ago")


def acquire(path: Path, ttl: float = DEFAULT_TTL, wait: float = 0.0) -> filelock.SoftFileLease | None:
    """Take the lease at `path` (its folder is created), waiting up to `wait` seconds for a live
    holder to release it; None when a live holder keeps it.

    A marker that looks older than `ttl` (its mtime) is watched for up to 1.5 x ttl and taken over if
    it does not change in `ttl`; a live holder's heartbeat changes it, and then this returns None.
    Release the lease with `.release()`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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
        raise LockedError(f"{what} is in use by {holder(Path(path))} (lease {path}; a lease whose holder "
                          f"died expires after {ttl:.0f}s)")
    try:
        yield lease
    finally:
        lease.release()
