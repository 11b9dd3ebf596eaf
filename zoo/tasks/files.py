"""Checks on a local data file before `datasets` reads it, so that an empty, non-UTF-8 or non-JSON file
is one clear error naming the file and line (datasets raises a bare StopIteration, UnicodeDecodeError or
DatasetGenerationError)."""

from __future__ import annotations

import codecs
import json
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
                raise TaskError(
                    f"data file {path!r} is not UTF-8 text: byte {chunk[e.start : e.start + 1]!r} at "
                    f"offset {at} (line {line}); re-save it as UTF-8"
                ) from None
            if not chunk:
                return
            offset += len(chunk)
            lines += chunk.count(b"\n")


TASK_ROW = '{"question": ..., "answer": ...}'


def check_json_file(path: str, row: str = TASK_ROW) -> None:
    """Raise TaskError naming `path` and the first line that is not JSON, when a .json/.jsonl file is
    neither one JSON document nor JSON lines (the two forms `datasets`' json builder reads); the
    message shows `row`, the object each line should hold."""
    forms = f"JSON lines, one object per line ({row}), or one JSON array or object of such rows"
    if os.path.splitext(path)[1].lower() not in (".json", ".jsonl"):
        return
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        json.loads(text)
        return  # one document (an array or an object of columns)
    except (json.JSONDecodeError, RecursionError):
        pass
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskError(
                f"data file {path!r}, line {i}: not valid JSON ({e.msg} at column {e.colno}); expected {forms}"
            ) from None
        except RecursionError:
            raise TaskError(
                f"data file {path!r}, line {i}: nested too deeply to read; a row is a flat mapping"
            ) from None
        if not isinstance(row, dict):
            raise TaskError(
                f"data file {path!r}, line {i}: a JSON {type(row).__name__}, not an object; expected {forms}"
            )
