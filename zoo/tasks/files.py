"""Checks on a local data file before `datasets` reads it, so that an empty or non-UTF-8 file is one
clear error naming the file (datasets raises a bare StopIteration or UnicodeDecodeError)."""
from __future__ import annotations

import codecs
import os

from zoo.tasks.base import TaskError

TEXT_FORMATS = (".json", ".jsonl", ".csv")
CHUNK = 1 << 20


def check_data_file(path: str) -> None:
    """Raise TaskError naming `path` when it is empty, or (json/jsonl/csv) not UTF-8 text; the
    message gives the line and byte offset of the first bad byte."""
    if os.path.getsize(path) == 0:
        raise TaskError(f"data file {path!r} is empty: expected one question/answer row per line (jsonl) or a table")
    if os.path.splitext(path)[1].lower() not in TEXT_FORMATS:
        return
    dec = codecs.getincrementaldecoder("utf-8")()
    offset = lines = 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            try:
                dec.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                at = offset + e.start  # (off by < 4 bytes when a character spans two chunks)
                line = lines + chunk[: e.start].count(b"\n") + 1
                raise TaskError(f"data file {path!r} is not UTF-8 text: byte {chunk[e.start:e.start + 1]!r} at "
                                f"offset {at} (line {line}); re-save it as UTF-8") from None
            if not chunk:
                return
            offset += len(chunk)
            lines += chunk.count(b"\n")
