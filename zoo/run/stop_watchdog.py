"""SIGTERM and Ctrl-C always stop a `zoo run` / `zoo ablate` within a bounded time.

The Python-level handler (zoo.cli.run) raises KeyboardInterrupt in the main thread, which ends the
run as interrupted and resumable from its last checkpoint. That handler runs only when the main thread
gets back to the interpreter: a long native call (a tokenizer or torch op over a huge batch) or code
that swallows the interrupt would keep the process alive. The watchdog does not depend on the main
thread: `signal.set_wakeup_fd` makes the C-level handler write the signal's number to a pipe at once,
a daemon thread reads it and, if the process is still alive GRACE_S seconds later (or at a second
SIGTERM / Ctrl-C), prints one line and exits with 128 + the signal. Checkpoints are written to a
temporary name and renamed, so the last complete one is what a resume reads.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: seconds between the first SIGTERM / Ctrl-C and the forced exit (env ZOO_STOP_GRACE_S overrides)
GRACE_S = 15.0
_STOPS = (signal.SIGTERM, signal.SIGINT)
_write_fd: int | None = None


def grace_s() -> float:
    try:
        return float(os.environ.get("ZOO_STOP_GRACE_S", GRACE_S))
    except ValueError:
        return GRACE_S


def install() -> bool:
    """Start the watchdog (once, from the main thread; False elsewhere or when another wakeup fd is
    set, e.g. an asyncio loop's) until `uninstall`."""
    global _write_fd
    if _write_fd is not None or threading.current_thread() is not threading.main_thread():
        return _write_fd is not None
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(r), os.close(w)
        return False
    if old != -1:  # someone else's: keep theirs
        signal.set_wakeup_fd(old)
        os.close(r), os.close(w)
        return False
    threading.Thread(target=_watch, args=(r,), name="zoo-stop-watchdog", daemon=True).start()
    _write_fd = w
    return True


def uninstall() -> None:
    """Stop the watchdog (the command is over: e.g. one of several run in one process, as tests do)."""
    global _write_fd
    if _write_fd is None or threading.current_thread() is not threading.main_thread():
        return
    if signal.set_wakeup_fd(-1) != _write_fd:  # someone set another since: leave theirs
        signal.set_wakeup_fd(signal.set_wakeup_fd(-1))
    os.close(_write_fd)  # the thread reads end-of-file and returns
    _write_fd = None


def _watch(fd: int) -> None:
    first: float | None = None
    signum = signal.SIGTERM
    while True:
        timeout = None if first is None else max(0.0, first + grace_s() - time.monotonic())
        if timeout == 0.0:
            break
        if first is not None:
            import select

            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                break
        data = os.read(fd, 64)
        if not data:  # uninstalled
            os.close(fd)
            return
        stops = [b for b in data if b in _STOPS]
        if not stops:
            continue
        if first is not None:  # a second stop: now
            signum = stops[-1]
            break
        first, signum = time.monotonic(), stops[-1]
    sys.stderr.write(
        f"zoo: still running {grace_s():g} s after signal {signum} (or a second one came): exiting now; "
        "the last saved checkpoint is kept (resume with zoo run --resume RUN_DIR)\n"
    )
    sys.stderr.flush()
    os._exit(128 + int(signum))
