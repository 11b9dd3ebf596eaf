"""How `zoo run` and `zoo ablate` stop: SIGTERM as Ctrl-C, zoo.run.stop_watchdog while the command
runs, and the shell's exit status of an interrupt."""

from __future__ import annotations

import functools


def sigterm_as_interrupt() -> None:
    """SIGTERM (a scheduler's `kill`, SLURM's time limit) stops a run like Ctrl-C: the run is marked
    interrupted, its last checkpoint kept, and the resume command printed; zoo.run.stop_watchdog ends a
    process still alive GRACE_S seconds later (a native call that never yields, an interrupt swallowed)."""
    import signal
    import threading

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def stop_always() -> None:
    """SIGTERM as Ctrl-C (`sigterm_as_interrupt`), and zoo.run.stop_watchdog while the command runs
    (`uninstalls_watchdog` ends it)."""
    from zoo.run import stop_watchdog

    sigterm_as_interrupt()
    stop_watchdog.install()  # a process that does not stop within its grace is ended anyway


def uninstalls_watchdog(command):
    """Wrap a command so the watchdog `stop_always` started ends with it, however it ends (typer gives
    the callback no click context to close on, so a command run in-process, as the tests and CliRunner
    do, would leave it armed: a later SIGTERM to that process then ended it 15 s on)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from zoo.run import stop_watchdog

        try:
            return command(*args, **kwargs)
        finally:
            stop_watchdog.uninstall()

    return wrapper


def interrupt_code(e: BaseException) -> int:
    """The exit status of an interrupted command, the shell's 128 + signal: 143 for SIGTERM (raised as
    KeyboardInterrupt("signal 15") by `sigterm_as_interrupt`), 130 for Ctrl-C."""
    text = str(e)
    if text.startswith("signal ") and text[7:].isdigit():
        return 128 + int(text[7:])
    return 130


def skip_final_collection() -> None:
    """Before an interrupted process exits: the interpreter's last garbage collection walks every object
    still alive (a huge step's prompts and messages: 4 s of a 1,000,000-completion step here, after the
    `interrupted` line), though the process is ending and the OS frees its memory at once. `gc.freeze`
    (the standard library's way to exempt the objects alive now from collection) leaves them out, so
    SIGTERM / Ctrl-C ends the process within a second of that line (0.2-0.6 s measured)."""
    import gc

    gc.freeze()
