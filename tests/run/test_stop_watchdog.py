"""SIGTERM always stops the process (issue 37 §2): a main thread that does not get back to the
interpreter, or swallows the interrupt (here: a handler that does nothing), is ended GRACE_S seconds after the signal, exit 143."""

import os
import signal
import subprocess
import sys
import time

SWALLOWS = """
import sys, time
from zoo.run import stop_watchdog
assert stop_watchdog.install()
import signal
signal.signal(signal.SIGTERM, lambda signum, frame: None)  # the interrupt never takes effect (a stuck phase)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def _start(code, grace="1"):
    env = {**os.environ, "ZOO_STOP_GRACE_S": grace}
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def test_sigterm_ends_a_process_that_does_not_stop_within_the_grace():
    p = _start(SWALLOWS)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=30)
    took = time.monotonic() - t0
    err = p.stderr.read()
    assert rc == 143 and 0.8 < took < 10, (rc, took, err)
    assert "still running 1 s after signal 15" in err and "resume with zoo run --resume" in err
    assert "Traceback" not in err


def test_a_second_sigterm_ends_it_at_once():
    p = _start(SWALLOWS, grace="60")
    p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 143 and time.monotonic() - t0 < 5


def test_the_watchdog_is_gone_after_the_command():
    from zoo.run import stop_watchdog

    assert stop_watchdog.install()
    stop_watchdog.uninstall()
    assert signal.set_wakeup_fd(-1) == -1 and stop_watchdog._write_fd is None
    time.sleep(0.1)
    import threading

    assert not [t for t in threading.enumerate() if t.name == "zoo-stop-watchdog"]


def test_a_command_run_in_process_leaves_no_watchdog_armed(tmp_path, monkeypatch):
    """`zoo ablate` through CliRunner (as tests and scripts run it): the watchdog it started ends with it,
    so a later SIGTERM to this process (tests/cli's test_sigterm_stops_like_ctrl_c) cannot end it 15 s on.
    Before the fix the wakeup fd stayed set and the CI's pytest process exited mid-suite."""
    from typer.testing import CliRunner

    from zoo.cli import app
    from zoo.run import stop_watchdog

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["ablate", str(root / "experiments/quickstart.yaml"), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert stop_watchdog._write_fd is None and signal.set_wakeup_fd(-1) == -1
