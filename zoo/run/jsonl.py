"""The run folder's JSONL and JSON files: append records, read them back (skipping lines a crash cut),
drop the records past a checkpoint's step on resume. `zoo.run.tracking.Tracker` writes through these;
`zoo study`, `zoo report` and the plots read through them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

from zoo.core.faults import write_guard

log = logging.getLogger(__name__)


def _plain(v: Any) -> Any:
    """Tensors / numpy scalars -> Python numbers; containers recursively; other values unchanged."""
    if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
        return v.item()
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def append_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append one JSON object per line (non-JSON values via str). Raises WriteError (zoo.core.faults:
    disk full, read-only file) naming the file."""
    lines = "".join(json.dumps(_plain(r), default=str) + "\n" for r in records)
    with write_guard(path), open(path, "a", encoding="utf-8") as f:
        f.write(lines)


def read_jsonl_counted(path: Path) -> tuple[list[dict[str, Any]], int]:
    """(records, skipped) of a JSONL file (([], 0) if missing or unreadable as a file): a line that is
    not UTF-8, not JSON (e.g. cut by a crash or a full disk) or not an object is skipped and counted."""
    try:
        data = Path(path).read_bytes() if Path(path).is_file() else b""
    except OSError:
        return [], 0
    out, skipped = [], 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError and JSONDecodeError
            rec = None
        if isinstance(rec, dict):
            out.append(rec)
        else:
            skipped += 1
    return out, skipped


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file ([] if missing); unreadable lines are skipped (`read_jsonl_counted`),
    with one warning naming the file and how many."""
    out, skipped = read_jsonl_counted(path)
    if skipped:
        log.warning("%s: skipped %d unreadable line(s) (not UTF-8 JSON objects; cut by a crash?)", path, skipped)
    return out


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file as a dict ({} if missing, unreadable, not UTF-8 or not an object): summary.json, study.json."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # ValueError: JSONDecodeError, UnicodeDecodeError
        return {}
    return data if isinstance(data, dict) else {}


def truncate_jsonl(path: Path, step: int) -> int:
    """Keep the records with `step <= step` (and those without a step); returns how many were dropped.

    The file is rewritten atomically, only when a record or an unreadable line goes; a missing file
    is left missing. Raises WriteError."""
    path = Path(path)
    if not path.is_file():
        return 0
    recs, skipped = read_jsonl_counted(path)
    keep = [r for r in recs if not isinstance(r.get("step"), (int, float)) or r["step"] <= step]
    if len(keep) == len(recs) and not skipped:
        return 0  # nothing to drop: no rewrite (nor a second copy of the file on a full disk)
    if skipped:
        log.warning("%s: dropping %d unreadable line(s) (not UTF-8 JSON objects; cut by a crash?)", path, skipped)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with write_guard(path, tmp=tmp):
        tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in keep), encoding="utf-8")
        tmp.replace(path)
    return len(recs) - len(keep)


def missing_step_record(path: Path, step: int) -> str | None:
    """Why the metrics file `path` cannot continue a run resumed from a checkpoint at `step`: it has no
    intact training record of that step (its line was cut or damaged), so the summary and the report
    would take an earlier step's numbers for the last. None when the record is there, `step` is 0 or
    the file is missing."""
    path = Path(path)
    if step <= 0 or not path.is_file():
        return None
    recs, skipped = read_jsonl_counted(path)
    if any(r.get("step") == step and "reward/total" in r for r in recs):
        return None
    return (
        f"{path}: no intact record of step {step}, the step the run's checkpoint holds ({skipped} damaged "
        f"line(s) skipped): resuming would report step {step} with another step's numbers; restore the "
        "file, or retrain the run with --fresh"
    )
