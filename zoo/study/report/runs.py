"""A study folder read back for the report: one `RunData` per arm run (seed), grouped into arms.

Damaged files never stop a report: unreadable metrics lines (cut by a crash, not UTF-8) are skipped and
counted, and each problem is a warning naming the file. Runs whose labels differ only by the
`-s<seed>` suffix form one arm (`ArmGroup`).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from zoo.run.tracking import read_json, read_jsonl_counted
from zoo.study.report.study_index import read_index
from zoo.study.study_checks import foreign_arm_dir

_SEED_SUFFIX = re.compile(r"-s(-?\d+)$")


class ReportError(ValueError):
    """The folder holds nothing to report on; the message names it."""


@dataclass
class RunData:
    """One arm run (one seed) read from its folder."""

    label: str
    dir: Path
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]
    seed: int | None = None
    status: str = "pending"
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def group(self) -> str:
        return _SEED_SUFFIX.sub("", self.label)

    def series(self, key: str) -> dict[int, float]:
        """step -> value of `key` (finite numbers; the last record of a step wins)."""
        out: dict[int, float] = {}
        for r in self.records:
            v, s = r.get(key), r.get("step")
            if (
                isinstance(v, (int, float))
                and not isinstance(v, bool)
                and math.isfinite(v)
                and isinstance(s, (int, float))
            ):
                out[int(s)] = float(v)
        return dict(sorted(out.items()))


@dataclass
class ArmGroup:
    """The runs (seeds) of one arm."""

    name: str
    runs: list[RunData] = field(default_factory=list)

    @property
    def ok_runs(self) -> list[RunData]:
        """The seeds the numbers use: all but failed runs."""
        return [r for r in self.runs if r.status != "failed"]


def load_run(d: Path) -> RunData:
    """Read one arm folder (missing files give empty records / dicts; damaged ones add a warning
    naming the file to `RunData.warnings`)."""
    summ = read_json(d / "summary.json")
    cfg = _read_yaml(d / "config.yaml")
    recs, skipped = read_jsonl_counted(d / "metrics.jsonl")
    warnings = [
        f"{d / f}: unreadable, ignored"
        for f, data in (("summary.json", summ), ("config.yaml", cfg))
        if (d / f).is_file() and not data
    ]
    if skipped:
        warnings.append(
            f"{d / 'metrics.jsonl'}: skipped {skipped} unreadable line(s) (cut by a crash, or not UTF-8 JSON)"
        )
    status = (
        summ.get("status") if summ.get("status") in ("finished", "failed") else ("unfinished" if recs else "pending")
    )
    steps = [int(r["step"]) for r in recs if isinstance(r.get("step"), (int, float)) and "reward/total" in r]
    if status == "finished" and isinstance(summ.get("steps"), int) and max(steps, default=0) < summ["steps"]:
        warnings.append(
            f"{d / 'metrics.jsonl'}: ends at step {max(steps, default=0)} but summary.json records "
            f"{summ['steps']} steps (file cut?); final numbers are summary.json's, curves stop early"
        )
    m = _SEED_SUFFIX.search(d.name)
    seed = cfg.get("seed", int(m.group(1)) if m else None)
    return RunData(d.name, d, recs, summ, cfg, seed, status, summ.get("error"), warnings)


def _read_yaml(p: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: not UTF-8
        return {}
    return data if isinstance(data, dict) else {}


def discover(study_dir: Path) -> list[RunData]:
    """Every arm run under study_dir (folders with metrics.jsonl, summary.json or config.yaml), in
    study.json order when present, then by name; arms listed in study.json without a folder are
    'pending'; arm folders of another study (a symlink out of study_dir) are left out with a warning.
    A folder that is itself a run gives a one-run report. Raises ReportError if none."""
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise ReportError(f"{study_dir}: no such folder (expected runs/<study>)")
    marker = ("metrics.jsonl", "summary.json", "config.yaml")
    if (study_dir / "metrics.jsonl").exists():
        logging.getLogger(__name__).warning(
            "report %s: a run folder, not a study folder: a one-run report (report.md, plots/) is written into it",
            study_dir,
        )
        return [load_run(study_dir)]
    dirs = {d.name: d for d in sorted(study_dir.iterdir()) if d.is_dir() and any((d / m).exists() for m in marker)}
    index = read_index(study_dir)[0]  # a damaged study.json: what its text still says (report warns)
    own = index.get("name")
    foreign = {label: why for label, d in dirs.items() if (why := foreign_arm_dir(study_dir, d, own))}
    for why in foreign.values():  # a symlinked arm of another study is not this study's result
        logging.getLogger(__name__).warning("report %s: left out %s", study_dir, why)
    order = [a.get("label") for a in index.get("arms", []) if isinstance(a, dict) and a.get("label")]
    names = [n for n in dict.fromkeys(order + sorted(dirs)) if n not in foreign]
    runs = [load_run(dirs.get(n, study_dir / n)) for n in names]
    if not runs:
        raise ReportError(f"{study_dir}: no arm folders (with metrics.jsonl, summary.json or config.yaml)")
    return runs


def group_runs(runs: Iterable[RunData]) -> list[ArmGroup]:
    """Runs grouped by label without -s<seed>, in first-seen order."""
    groups: dict[str, ArmGroup] = {}
    for r in runs:
        groups.setdefault(r.group, ArmGroup(r.group)).runs.append(r)
    return list(groups.values())
