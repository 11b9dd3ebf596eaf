"""The report's statistics over seeds: for each arm and metric, the per-seed values, their IQM and 95%
bootstrap interval; for each arm against the study's baseline, the difference paired by seed
(zoo.study.report.intervals). Metrics (one number per run, then the interval over the arm's seeds):

    final reward          reward/total at the last step (a finished run's summary.json value)
    best reward           the maximum of reward/total over the steps
    reward last k         the mean of reward/total (and of each reward/<objective>) over the last
                          LAST_K steps (all steps when fewer)
    eval accuracy         greedy eval accuracy after training
    <diagnostic>          the mean over the run's steps of each diagnostic it logged (adv/corr/*,
                          completion/len_correct, len_incorrect, len_reward_corr, gold/*)

Only finished runs count (zoo.study.report.left_out): a run killed mid-training has no final numbers.
Pairing by seed holds when both arms drew the same prompts at each (seed, step): the same task,
prompts_per_step and group size. Otherwise the arms are compared as independent samples and the
report says why.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable

from zoo.study.report.intervals import Difference, Estimate, difference, estimate
from zoo.study.report.left_out import finished_runs
from zoo.study.report.runs import ArmGroup, RunData
from zoo.study.report.stats import eval_acc, reward_keys
from zoo.study.report.table import used_values

LAST_K = 5
DIAGNOSTIC_PREFIXES = (
    "adv/corr/",
    "completion/len_correct",
    "completion/len_incorrect",
    "completion/len_reward_corr",
    "gold/",
)


def final_value(run: RunData, key: str) -> float | None:
    """`key` at the last step: a finished run's summary.json value when it has one, else the last
    metrics.jsonl value."""
    v = run.summary.get(key)
    if run.status == "finished" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    s = run.series(key)
    return list(s.values())[-1] if s else None


def last_k_mean(run: RunData, key: str, k: int = LAST_K) -> float | None:
    """Mean of `key` over the run's last `k` steps (all when fewer); None without a value."""
    vals = list(run.series(key).values())[-k:]
    return statistics.fmean(vals) if vals else None


def run_mean(run: RunData, key: str) -> float | None:
    """Mean of `key` over every step of the run that logged a finite value; None without one."""
    vals = list(run.series(key).values())
    return statistics.fmean(vals) if vals else None


def metric_table(groups: list[ArmGroup]) -> list[tuple[str, Callable[[RunData], float | None]]]:
    """(metric name, run -> its one number) for every metric the runs have (module doc)."""
    runs = [r for g in groups for r in g.runs]
    rk = reward_keys(runs)
    out: list[tuple[str, Callable[[RunData], float | None]]] = [
        ("final reward", lambda r: final_value(r, "reward/total")),
        ("best reward", lambda r: max(r.series("reward/total").values(), default=None)),
    ]
    # the label says the steps the mean covers: "last 2" when no run has more than 2 (last_k_mean takes all when fewer)
    n = min(LAST_K, max((len(r.series("reward/total")) for r in runs), default=LAST_K))
    out += [(f"{k} last {n}", lambda r, k=k: last_k_mean(r, k)) for k in rk]
    out.append(("eval accuracy", lambda r: eval_acc(r, "after")))
    diags = sorted({k for r in runs for rec in r.records for k in rec if k.startswith(DIAGNOSTIC_PREFIXES)})
    out += [(f"{k} (run mean)", lambda r, k=k: run_mean(r, k)) for k in diags]
    return out


@dataclass
class ArmStat:
    """One metric of one arm: per-seed values and the interval estimate."""

    metric: str
    arm: str
    values: dict[int, float]
    estimate: Estimate


@dataclass
class ArmComparison:
    """One metric of one arm against the baseline; `note` says why pairing does not hold ('' if it does)."""

    metric: str
    arm: str
    baseline: str
    diff: Difference
    note: str = ""


def per_seed(g: ArmGroup, fn: Callable[[RunData], float | None]) -> dict[int, float]:
    """{seed: value} over the arm's finished runs with a finite value (seed: the run's seed, else its
    position); unfinished, failed and pending runs are left out (zoo.study.report.left_out)."""
    out = {}
    for i, r in enumerate(finished_runs(g)):
        v = fn(r)
        if v is not None and math.isfinite(v):
            out[r.seed if r.seed is not None else i] = float(v)
    return out


def pairing_note(a: ArmGroup, b: ArmGroup) -> str:
    """'' when the arms saw the same prompts per (seed, step): same task, prompts_per_step and group
    size; else what differs (then the report compares them unpaired)."""
    ra, rb = (a.ok_runs or a.runs), (b.ok_runs or b.runs)
    if not ra or not rb:
        return ""
    ca, cb = ra[0].config, rb[0].config
    diffs = []
    ga, gb = used_values(ra[0])["group_size"], used_values(rb[0])["group_size"]
    if ga != gb:
        diffs.append(f"group sizes {ga} vs {gb}")
    pa, pb = (ca.get("budget") or {}).get("prompts_per_step"), (cb.get("budget") or {}).get("prompts_per_step")
    if pa != pb:
        diffs.append(f"prompts per step {pa} vs {pb}")
    if ca.get("task") != cb.get("task"):
        diffs.append("different tasks")
    return f"not paired: {', '.join(diffs)}" if diffs else ""


def baseline_of(groups: list[ArmGroup], named: str | None) -> tuple[ArmGroup | None, str]:
    """(the baseline arm, a warning or ''): the arm `named` (study.json's `baseline`), else the first.
    A baseline without finished runs gives no comparisons, and the warning says so."""
    if not groups:
        return None, ""
    by_name = {g.name: g for g in groups}
    warning = ""
    if named and named not in by_name:
        warning = (
            f"baseline {named!r} is not an arm of this report (arms: {', '.join(by_name)}); "
            f"comparing against the first arm, {groups[0].name}"
        )
    base = by_name.get(named or "", groups[0])
    if not finished_runs(base) and len(groups) > 1:
        states = ", ".join(f"{r.label} {r.status}" for r in base.runs)
        warning = "; ".join(
            filter(
                None,
                [
                    warning,
                    f"baseline arm {base.name} has no finished run ({states}): no comparisons against the baseline",
                ],
            )
        )
    return base, warning


def seed_statistics(
    groups: list[ArmGroup], baseline: str | None = None
) -> tuple[list[ArmStat], list[ArmComparison], str]:
    """Every arm's interval estimates, every other arm against the baseline, and a warning ('' if none)."""
    metrics = metric_table(groups)
    stats = []
    values: dict[tuple[str, str], dict[int, float]] = {}
    for name, fn in metrics:
        for g in groups:
            vals = values[(name, g.name)] = per_seed(g, fn)
            if vals:  # a metric the arm never logged (or only as NaN) gets no row
                stats.append(ArmStat(name, g.name, vals, estimate(list(vals.values()))))
    base, warning = baseline_of(groups, baseline)
    comps = []
    for g in groups:
        if base is None or g is base:
            continue
        note = pairing_note(g, base)
        for name, _ in metrics:
            a, b = values[(name, g.name)], values[(name, base.name)]
            if a and b:
                comps.append(ArmComparison(name, g.name, base.name, difference(a, b, paired=not note), note))
    return stats, comps, warning


def _clean(x: Any) -> Any:
    """JSON-safe: non-finite floats -> None, dict keys -> str."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _diff_json(d: Difference) -> dict[str, Any]:
    """A Difference as JSON: seeds_needed an integer or null, with seeds_needed_note saying why null
    ("delta is 0": no finite number of seeds; "fewer than 2 seeds": no spread to extrapolate from)."""
    out = asdict(d)
    n = d.seeds_needed
    out["seeds_needed"] = int(n) if n is not None and math.isfinite(n) else None
    out["seeds_needed_note"] = (
        None if out["seeds_needed"] is not None else "delta is 0" if n is not None else "fewer than 2 seeds"
    )
    return out


def to_json(stats: list[ArmStat], comps: list[ArmComparison], baseline: str | None) -> dict[str, Any]:
    """{"baseline", "stats": [{metric, arm, values, estimate: {n, iqm, low, high}}],
    "comparisons": [{metric, arm, baseline, note, verdict, diff: {...}}]} (JSON-safe)."""
    return _clean(
        {
            "baseline": baseline,
            "stats": [asdict(s) for s in stats],
            "comparisons": [{**asdict(c), "verdict": c.diff.verdict, "diff": _diff_json(c.diff)} for c in comps],
        }
    )
