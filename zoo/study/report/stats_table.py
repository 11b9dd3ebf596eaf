"""The report's statistics tables as (header, rows) of strings: per arm and metric the IQM and its 95%
interval over seeds, and per arm and metric the difference against the baseline (zoo.study.report.seed_stats)."""

from __future__ import annotations

import math

from zoo.study.report.intervals import FEW_MARK, FEW_SEEDS
from zoo.study.report.seed_stats import ArmComparison, ArmStat

STATS_HEADER = ["metric", "arm", "seeds", "IQM", "95% CI"]
COMPARE_HEADER = ["metric", "arm", "vs", "pairs", "Δ mean", "95% CI", "P(improve)", "verdict", "seeds for 80% power"]
NO_INTERVAL = "1 seed: no interval"
# FEW_SEEDS, FEW_MARK (zoo.study.report.intervals): below FEW_SEEDS seeds an interval is marked FEW_MARK
# (report.STATS_TEXT says why) and so is a "higher" / "lower" verdict
MANY_SEEDS = 10**6  # seeds_needed above this prints as "> 10^6" (report.json keeps the number)


def fmt(v: float | None, digits: int = 3) -> str:
    """A number with `digits` decimals; "-" for None."""
    return "-" if v is None else f"{v:.{digits}f}"


def fmt_ci(low: float | None, high: float | None, n: int, digits: int = 3) -> str:
    """ "[low, high]", marked "[low, high]†" from fewer than FEW_SEEDS seeds (a percentile bootstrap of
    2-4 values is about [min, max] and covers less than 95%); "1 seed: no interval" for one seed; "-"
    without values."""
    if low is None or high is None:
        return NO_INTERVAL if n == 1 else "-"
    return f"[{low:.{digits}f}, {high:.{digits}f}]" + (FEW_MARK if n < FEW_SEEDS else "")


def fmt_seeds_needed(n: float | None) -> str:
    """ "-" (no estimate), "∞" (delta 0 or rounding noise), "> 10^6" above MANY_SEEDS, else the count."""
    if n is None:
        return "-"
    if math.isinf(n):
        return "∞"
    return "> 10^6" if n > MANY_SEEDS else str(int(n))


def stats_rows(stats: list[ArmStat]) -> tuple[list[str], list[list[str]]]:
    """(STATS_HEADER, one row per metric and arm): seeds used, IQM, 95% bootstrap interval."""
    rows = [
        [s.metric, s.arm, str(s.estimate.n), fmt(s.estimate.iqm), fmt_ci(s.estimate.low, s.estimate.high, s.estimate.n)]
        for s in stats
    ]
    return STATS_HEADER, rows


def compare_rows(comps: list[ArmComparison]) -> tuple[list[str], list[list[str]]]:
    """(COMPARE_HEADER, one row per arm and metric): the difference arm - baseline (paired by seed, or
    '(unpaired)'), its interval, P(improvement), the verdict (with why pairing does not hold) and
    n = (z_0.975 + z_0.8)^2 sigma_d^2 / delta^2."""
    rows = []
    for c in comps:
        d = c.diff
        need = fmt_seeds_needed(d.seeds_needed)
        verdict = d.verdict + (f" ({c.note})" if c.note else "")
        rows.append(
            [
                c.metric,
                c.arm,
                c.baseline,
                f"{d.pairs}" + ("" if d.paired else " (unpaired)"),
                fmt(d.delta),
                fmt_ci(d.low, d.high, d.pairs),
                fmt(d.p_improve, 2),
                verdict,
                need,
            ]
        )
    return COMPARE_HEADER, rows
