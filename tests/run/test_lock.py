"""zoo.run.lock: a lease per run folder, exclusive between threads and processes, expiring without heartbeat."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from zoo.run import lock

HOLD = """
import sys, time
from zoo.run import lock
lease = lock.acquire(sys.argv[1], ttl=float(sys.argv[2]))
print("held" if lease else "refused", flush=True)
time.sleep(600)
"""


def _holder(path: Path, ttl: float) -> subprocess.Popen:
    """A process that takes the lease and keeps it (its heartbeat running) until killed."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.stdout.readline().strip() == "held"
    return p


def _in_thread(fn):
    """fn()'s result (or the exception it raised) in another thread."""
    out = []

    def run():
        try:
            out.append(fn())
        except Exception as e:  # noqa: BLE001 - handed back to the test
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


def test_second_holder_is_refused_and_told_who_holds_it(tmp_path):
    path = tmp_path / "run" / lock.LOCK_NAME
    with lock.locked(path, what="run folder X", ttl=5.0):
        assert _in_thread(lambda: lock.acquire(path, ttl=5.0)) is None  # another thread
        with lock.locked(path, what="run folder X", ttl=5.0):  # the same thread again: reentrant
            pass
        err = _in_thread(lambda: lock.locked(path, what="run folder X", ttl=5.0).__enter__())
        assert isinstance(err, lock.LockedError)
        assert str(err).startswith(f"run folder X is in use by pid {os.getpid()} on host {socket.gethostname()}")
    got = _in_thread(lambda: lock.acquire(path, ttl=5.0))  # released: free for the next one
    assert got is not None
    got.release()


def test_lease_held_by_another_process_is_refused(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    p = _holder(path, 5.0)
    try:
        assert lock.acquire(path, ttl=5.0) is None
        assert f"pid {p.pid} on host {socket.gethostname()}" in lock.holder(path)
    finally:
        p.kill()
        p.wait()


def test_lease_of_a_killed_process_is_taken_over_at_once(tmp_path):
    path = tmp_path / lock.LOCK_NAME
    p = _holder(path, 30.0)
    p.kill()
    p.wait()
    t = time.monotonic()
    lease = lock.acquire(path, ttl=30.0)
    assert lease is not None and time.monotonic() - t < 5  # same host, dead pid: no need to wait the TTL
    lease.release()


def test_heartbeat_keeps_the_lease_and_an_expired_one_is_taken_over(tmp_path):
    """A stopped holder (alive, but its heartbeat frozen, as a hung or partitioned node looks from
    here) loses the lease after the TTL; while it runs, its heartbeat keeps it however long."""
    path, ttl = tmp_path / lock.LOCK_NAME, 1.2
    p = _holder(path, ttl)
    try:
        time.sleep(3 * ttl)
        assert lock.acquire(path, ttl=ttl) is None  # renewed every ttl/4: still fresh
        assert time.time() - path.stat().st_mtime < ttl
        os.kill(p.pid, signal.SIGSTOP)
        t = time.monotonic()
        time.sleep(ttl)
        lease = lock.acquire(path, ttl=ttl)
        assert lease is not None and time.monotonic() - t >= ttl
        assert f"pid {os.getpid()} " in lock.holder(path)
        lease.release()
    finally:
        p.kill()
        p.wait()
