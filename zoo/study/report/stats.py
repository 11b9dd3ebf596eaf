"""The numbers over an arm's seeds (mean +- sample std, n-1) and what they are taken from in one run:
the reward objectives it logged and its greedy eval accuracy before and after training."""

from __future__ import annotations

import math
import statistics
from typing import Iterable

from zoo.study.report.runs import RunData

#: "reward/..." metrics that describe the scoring, not an objective's value
NOT_OBJECTIVES = ("reward/failed", "reward/unscored_frac")


def mean_std(values: Iterable[float]) -> tuple[float, float, int] | None:
    """(mean, sample std (n-1; 0 for one value), n) of the finite values, or None when there are none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


def fmt_ms(values: Iterable[float], digits: int = 3) -> str:
    """ "0.450 ± 0.071" over several values, "0.450" for one, "-" for none."""
    ms = mean_std(values)
    if ms is None:
        return "-"
    m, s, n = ms
    return f"{m:.{digits}f}" if n == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"


def eval_acc(run: RunData, when: str) -> float | None:
    """Greedy eval accuracy 'before' or 'after' training: summary["eval/<when>"], else the eval record
    in metrics.jsonl marked "eval/phase" 0 (before) or 1 (after), else (records without the mark) the
    first eval record for 'before' and, only for a finished run, the last for 'after'. A run that did
    not finish has no after-training eval: None, never its before-training or a mid-training eval."""
    d = run.summary.get(f"eval/{when}")
    if isinstance(d, dict):
        for k in ("eval/greedy_acc", "greedy_acc"):
            if isinstance(d.get(k), (int, float)):
                return float(d[k])
    evals = [
        r
        for r in run.records
        if isinstance(r.get("eval/greedy_acc"), (int, float))
        and not isinstance(r.get("eval/greedy_acc"), bool)
        and math.isfinite(r["eval/greedy_acc"])
    ]
    phase = 0.0 if when == "before" else 1.0
    marked = [r for r in evals if r.get("eval/phase") == phase]
    if marked:
        return float(marked[-1]["eval/greedy_acc"])
    if not evals or any("eval/phase" in r for r in evals):  # marked records, none of this phase
        return None
    if when == "before":
        return float(evals[0]["eval/greedy_acc"])
    return float(evals[-1]["eval/greedy_acc"]) if run.status == "finished" else None


def reward_keys(runs: Iterable[RunData]) -> list[str]:
    """Every "reward/..." objective in the runs, reward/total first (reward/failed is a count and
    reward/unscored_frac a fraction of rows, not rewards: `NOT_OBJECTIVES`)."""
    keys = {k for r in runs for rec in r.records for k in rec if k.startswith("reward/") and k not in NOT_OBJECTIVES}
    return sorted(keys, key=lambda k: (k != "reward/total", k))
