"""`<study dir>/study.json` read back for the report, also when it is damaged.

study.json (written by zoo.study.runner.write_index) holds the study's name, its baseline arm and the
arm order. A damaged file (cut, not UTF-8, not an object) must not silently change the comparison:
what can be read from its text is kept (name, baseline, arm labels in order; else the baseline of
the study file it names), and the report warns naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from zoo.run.tracking import read_json

_STR = r'"{key}"\s*:\s*"((?:[^"\\]|\\.)*)"'  # "key": "value" in JSON text


def _strings(raw: str, key: str) -> list[str]:
    """Every string value of `key` in JSON text (in order), unescaped where it is valid JSON."""
    out = []
    for m in re.finditer(_STR.format(key=key), raw):
        try:
            out.append(json.loads(f'"{m.group(1)}"'))
        except ValueError:
            out.append(m.group(1))
    return out


def _study_file_baseline(path: str, study_dir: Path) -> str | None:
    """The `baseline:` of the study YAML at `path` (as written, or relative to the study folder's
    parent's parent: runs/<study> -> the project), None when unreadable or absent."""
    for p in (Path(path), study_dir.parent.parent / path):
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and isinstance(data.get("baseline"), str):
            return data["baseline"]
    return None


def read_index(study_dir: Path | str) -> tuple[dict[str, Any], str]:
    """(study.json as a dict, a warning or ''). Missing: ({}, ''). Damaged: the name, baseline and arm
    labels found in its text ({"name", "baseline", "arms": [{"label"}]}, each only when found), the
    baseline else from the study file it names (`file`), else the first arm label found (the
    runner's default baseline); the warning names the file and says what was kept."""
    path = Path(study_dir) / "study.json"
    if not path.is_file():
        return {}, ""
    data = read_json(path)
    if data:
        return data, ""
    try:
        raw = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        raw = ""
    out: dict[str, Any] = {}
    name, baseline, files = _strings(raw, "name")[:1], _strings(raw, "baseline")[:1], _strings(raw, "file")[:1]
    labels = _strings(raw, "label")
    if name:
        out["name"] = name[0]
    if labels:
        out["arms"] = [{"label": x} for x in labels]
    source = "read from its text"
    if baseline:
        out["baseline"] = baseline[0]
    elif files and (b := _study_file_baseline(files[0], Path(study_dir))):
        out["baseline"], source = b, f"from the study file {files[0]}"
    elif labels:
        out["baseline"], source = re.sub(r"-s-?\d+$", "", labels[0]), "its first arm, the default baseline"
    kept = (
        f"kept the baseline {out['baseline']!r} ({source})"
        if "baseline" in out
        else "its baseline is unknown, so the first arm by name is the baseline"
    )
    return out, (
        f"{path}: damaged (not a readable JSON object; rewritten by the next `zoo ablate`): {kept}"
        + (f" and the arm order ({len(labels)} arms)" if labels else "")
    )
