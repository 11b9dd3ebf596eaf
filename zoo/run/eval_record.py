"""Per-prompt evaluation records, and the before-training evaluation shared by a study's arms.

A run writes `eval_prompts.json` into its folder: {"before": {prompt id: greedy score}, "after": {...}}
(score 1.0 / 0.0, None when the reward could not score it), so a report can pair the two evaluations
prompt by prompt (zoo.study.report.eval_delta). A prompt's id is a hash of its text and gold answer, so the
pairing does not depend on the row order.

Every arm of a study starts from the same model, so its evaluation before training is the same
computation: the first arm to reach it writes it to `<study>/eval_before/<key>.json` and the others
read it. The key hashes everything that decides that evaluation: the model and its options, the eval
rows, the eval settings, `max_new_tokens`, the generator, the resolved precision and the torch thread
count (bf16 sums in another thread order change greedy tokens). A run outside a study keeps no cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from zoo.core.media import image_digest

RECORD = "eval_prompts.json"
CACHE_DIR = "eval_before"


def prompt_id(row: Mapping[str, Any]) -> str:
    """A stable id for one eval row: sha1 of its prompt and gold answer (12 hex digits), and of its
    images when it has any (`zoo.core.media.image_digest`; a text row's id is unchanged)."""
    parts = [row.get("prompt"), row.get("answer")]
    if "images" in row:  # the same question about another picture is another prompt
        parts.append([image_digest(x) for x in row["images"] or []])
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def per_prompt(rows: Sequence[Mapping[str, Any]], scores: Sequence[float | None]) -> dict[str, float | None]:
    """{prompt id: score} for the eval rows and their greedy scores (same order, same length).

    Raises ValueError when the lengths differ."""
    if len(rows) != len(scores):
        raise ValueError(f"per_prompt: {len(rows)} rows but {len(scores)} scores")
    return {prompt_id(r): (None if s is None else float(s)) for r, s in zip(rows, scores)}


def write_record(run_dir: Path | str, when: str, scores: Mapping[str, float | None]) -> None:
    """Put one evaluation (`when`: "before" or "after") into `<run_dir>/eval_prompts.json`, keeping the other."""
    path = Path(run_dir) / RECORD
    data = read_record(run_dir)
    data[when] = dict(scores)
    _atomic_write(path, data)


def read_record(run_dir: Path | str) -> dict[str, dict[str, float | None]]:
    """The run's per-prompt records ({} when it has none or the file is damaged)."""
    path = Path(run_dir) / RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def cache_key(parts: Mapping[str, Any]) -> str:
    """sha256 (16 hex digits) of the JSON of everything that decides the evaluation before training."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def read_cached(study_dir: Path | str, key: str) -> dict[str, Any] | None:
    """The cached evaluation {"metrics": {...}, "scores": {id: score}} under `key`, or None."""
    path = Path(study_dir) / CACHE_DIR / f"{key}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("metrics"), dict)
        or not isinstance(data.get("scores"), dict)
    ):
        return None
    return data


def write_cached(
    study_dir: Path | str,
    key: str,
    metrics: Mapping[str, float],
    scores: Mapping[str, float | None],
    parts: Mapping[str, Any],
) -> None:
    """Store an evaluation before training under `key` (atomically; `parts` kept for a reader)."""
    _atomic_write(
        Path(study_dir) / CACHE_DIR / f"{key}.json",
        {"metrics": dict(metrics), "scores": dict(scores), "key_parts": dict(parts)},
    )


def _atomic_write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)
