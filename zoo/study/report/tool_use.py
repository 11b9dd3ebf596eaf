"""The report's tool-use section, for studies with arms that ran with an environment (`task.env`):
per arm, the env metrics' mean over the first and the last half of the steps, and the evaluation's
tool calls at the end. Arms without an environment are listed with "-"."""

from __future__ import annotations

import statistics
from typing import Iterable

from zoo.study.report.runs import RunData

COLUMNS = (
    ("env/tool_calls", "tool calls / trajectory"),
    ("env/tool_errors", "tool errors / trajectory"),
    ("env/turns", "turns / trajectory"),
    ("accuracy", "accuracy"),
)
TEXT = (
    "Per trajectory of the first generation round of each step (docs/reference/metrics.md `env/*`): the mean over the "
    "first → the last half of the steps (one value with a single step), averaged over the arm's seeds that "
    "did not fail; *eval tool calls* is the greedy evaluation's mean at the last evaluation."
)


def _halves(run: RunData, key: str) -> tuple[float, float] | None:
    vals = list(run.series(key).values())
    if not vals:
        return None
    h = max(1, len(vals) // 2)
    return statistics.fmean(vals[:h]), statistics.fmean(vals[-h:])


def _mean(xs: Iterable[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def tool_use_lines(runs: list[RunData]) -> list[str]:
    """Markdown lines of the section ([] when no run logged `env/turns`)."""
    if not any(r.series("env/turns") for r in runs):
        return []
    arms: dict[str, list[RunData]] = {}
    for r in runs:
        if r.status != "failed":
            arms.setdefault(r.group, []).append(r)
    header = ["arm"] + [name for _, name in COLUMNS] + ["eval tool calls"]
    lines = ["", "## Tool use", "", TEXT, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm, rs in arms.items():
        cells = [f"`{arm}`"]
        for key, _ in COLUMNS:
            hs = [_halves(r, key) for r in rs] if any(r.series("env/turns") for r in rs) else []
            a, b = _mean(h[0] for h in hs if h), _mean(h[1] for h in hs if h)
            cells.append("-" if a is None else f"{a:.3f} → {b:.3f}")
        ev = _mean(list(r.series("eval/tool_calls").values())[-1] if r.series("eval/tool_calls") else None for r in rs)
        cells.append("-" if ev is None else f"{ev:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines
