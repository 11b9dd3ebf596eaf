"""File-system faults as one clear line: disk full, read-only folders, permissions.

    with write_guard(path, tmp=tmp):     # an OSError becomes WriteError naming `path`; `tmp` is removed
        ...

`WriteError` is an OSError (errno kept) whose message says what happened and to which file, e.g.
"no space left on device while writing runs/x/checkpoint/state.pt". The trainer adds which
checkpoint survives; the CLI prints `os_error_message(e)` as one line and exits 1.
"""

from __future__ import annotations

import errno
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


class WriteError(OSError):
    """Writing a file failed; `str(e)` is the whole message (`errno`, `filename` as in OSError)."""

    def __init__(self, message: str, err: int | None = None, filename: str | None = None) -> None:
        super().__init__(message)
        self.message, self.errno, self.filename = message, err, filename

    def __str__(self) -> str:
        return self.message


def reason(e: OSError) -> str:
    """A short human reason for an OSError: "no space left on device", "permission denied", ... ."""
    return _REASONS.get(e.errno or -1) or e.strerror or str(e) or type(e).__name__


def write_error(e: OSError, path: Path | str) -> WriteError:
    """`e` (raised while writing `path`) as a WriteError "<reason> while writing <path>"."""
    if isinstance(e, WriteError):
        return e
    return WriteError(f"{reason(e)} while writing {path}", e.errno, str(path))


@contextmanager
def write_guard(path: Path | str, tmp: Path | str | None = None) -> Iterator[None]:
    """Turn an OSError inside the block into `write_error(e, path)`; on any exception remove `tmp`
    (a half-written temporary file would keep a full disk full). Raises WriteError."""
    try:
        yield
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise write_error(e, path) from e
        raise


def os_error_message(e: OSError) -> str:
    """One line for any OSError at the CLI: a WriteError's own message, else "<reason>: <file>"."""
    if isinstance(e, WriteError):
        return str(e)
    names = [n for n in (e.filename, e.filename2) if n]
    return f"{reason(e)}: {' -> '.join(map(str, names))}" if names else f"{reason(e)} ({type(e).__name__})"


def with_last_checkpoint(e: WriteError, step: int | None, path: Path | str) -> WriteError:
    """`e` with which checkpoint survives appended: "...; the last good checkpoint is step N (<path>)"
    or "...; no checkpoint was saved yet"."""
    note = f"the last good checkpoint is step {step} ({path})" if step is not None else "no checkpoint was saved yet"
    return WriteError(f"{e}; {note}", e.errno, e.filename)


def say_unrecorded(status: str, path: Path | str, e: OSError) -> None:
    """Write to stderr that `status` could not be recorded in `path` (the record itself failed)."""
    sys.stderr.write(f"error: could not record status '{status}' in {path}: {os_error_message(e)}\n")
