"""Held-out accuracy after - before training for one run, paired over the eval prompts.

Each run writes the greedy score of every held-out prompt before and after training
(`eval_prompts.json`, zoo.run.eval_record). The same prompts are scored twice, so the change is the mean
of the per-prompt differences d_i = after_i - before_i (each in {-1, 0, 1} for a 0/1 correctness), and
its 95% interval is a percentile bootstrap over the prompts (the same scipy bootstrap as the seed
statistics, zoo.study.report.intervals). This interval is **one seed's evaluation noise**: it says whether
this trained model answers more of these prompts than the model it started from, not whether another
seed of training would (that is the seed statistics' job).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from zoo.study.report.intervals import _bootstrap, _mean_stat

EVAL_DELTA_TEXT = (
    "Greedy exact-answer accuracy on the held-out prompts, after − before training, paired per prompt "
    "(the same prompts before and after; Δ = mean of after_i − before_i). The 95% interval is a percentile "
    "bootstrap over the prompts: **one seed's evaluation noise, not training noise** (another training "
    "seed may differ by more). *improved* / *worse*: the interval excludes 0; otherwise *not "
    "distinguishable on these prompts*."
)


@dataclass
class EvalDelta:
    """after - before over `n` prompts scored both times: accuracies, the mean paired difference and
    its 95% bootstrap interval over prompts (None for n < 2)."""

    n: int
    before: float | None
    after: float | None
    delta: float | None
    low: float | None = None
    high: float | None = None

    @property
    def verdict(self) -> str:
        if self.delta is None:
            return "no data"
        if self.low is None or self.high is None:
            return "too few prompts"
        if self.low > 0:
            return "improved"
        if self.high < 0:
            return "worse"
        return "not distinguishable on these prompts"


def paired_delta(before: Mapping[str, float | None], after: Mapping[str, float | None]) -> EvalDelta:
    """EvalDelta of two {prompt id: greedy score} maps (None or NaN: unscored, left out). A prompt counts
    as correct only with a score of exactly 1.0 (partial credit counts 0), so before/after are the
    exact-answer accuracies `zoo.rewards.accuracy` gives.

    Only prompts scored both times count (paired). Raises nothing; no common prompt -> EvalDelta(0, ...None)."""
    common = [k for k in before if k in after and _ok(before[k]) and _ok(after[k])]
    if not common:
        return EvalDelta(0, None, None, None)
    b = np.asarray([_exact(before[k]) for k in common])  # [n] 0/1
    a = np.asarray([_exact(after[k]) for k in common])  # [n] 0/1
    d = a - b  # [n] per-prompt change
    out = EvalDelta(len(d), float(b.mean()), float(a.mean()), float(d.mean()))
    if len(d) >= 2:
        if np.all(d == d[0]):  # every prompt changed alike: the bootstrap interval is that one value
            out.low = out.high = float(d[0])
        else:
            out.low, out.high = _bootstrap((d,), _mean_stat)
    return out


def _exact(v: float) -> float:
    """1.0 for an exact answer (score 1.0), else 0.0: partial credit (reasoning_gym's 0.5 for "13"
    against "1") is not a correct answer, as in `zoo.rewards.accuracy`."""
    return 1.0 if float(v) == 1.0 else 0.0


def _ok(v: float | None) -> bool:
    return v is not None and math.isfinite(float(v))


def delta_rows(
    runs: Sequence[tuple[str, Mapping[str, Mapping[str, float | None]]]],
) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the eval-delta table: one row per run label with its per-prompt records
    {"before": {id: score}, "after": {id: score}}; runs without both records are left out."""
    header = ["run", "prompts", "before", "after", "after − before", "95% CI (prompts)", "verdict"]
    rows = []
    for label, rec in runs:
        if not rec.get("before") or not rec.get("after"):
            continue
        e = paired_delta(rec["before"], rec["after"])
        if e.delta is None:
            continue
        ci = f"[{e.low:+.3f}, {e.high:+.3f}]" if e.low is not None else "-"
        rows.append([label, str(e.n), f"{e.before:.3f}", f"{e.after:.3f}", f"{e.delta:+.3f}", ci, e.verdict])
    return header, rows


def delta_json(runs: Sequence[tuple[str, Mapping[str, Mapping[str, float | None]]]]) -> list[dict]:
    """report.json's `eval_after_minus_before`: per run with both records, the numbers of `delta_rows`
    ({"run", "prompts", "before", "after", "delta", "low", "high", "verdict"}; low/high None under 2 prompts)."""
    out = []
    for label, rec in runs:
        if not rec.get("before") or not rec.get("after"):
            continue
        e = paired_delta(rec["before"], rec["after"])
        if e.delta is not None:
            out.append(
                {"run": label, "prompts": e.n, "before": e.before, "after": e.after, "delta": e.delta}
                | {"low": e.low, "high": e.high, "verdict": e.verdict}
            )
    return out
