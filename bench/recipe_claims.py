# Feeds docs/results/studies.md "What the studies show" (the re-runs on the recipe, issue 30 §3).
"""The three claims of "What the studies show" that the recipe could change, from the run folders of
`experiments/learning_curve.yaml` (grpo, dapo, mo_grpo, dr_grpo; 5 seeds, lr 3e-4, 12 steps) and
`experiments/clip_higher_entropy.yaml` (dapo-symmetric), paired by seed (the arms of one seed see the
same prompts at every step). Differences: mean of the per-seed differences with zoo's paired bootstrap
interval (zoo.study.report.intervals.difference, the report's rule); one arm's value: mean with a 95%
t interval over seeds (scipy).

- MO-GRPO's share: `adv/corr/<objective>` (the correlation of the step's advantage with that objective's
  reward), mean over the 12 steps, mo_grpo - grpo.
- Dr. GRPO's length bias: completion/len_incorrect - completion/len_correct, mean over steps 7-12
  (the second half), for grpo and dr_grpo - grpo.
- Clip-higher and entropy (DAPO §3.1): mean entropy over steps 7-12 and over all steps, dapo -
  dapo-symmetric; the range of clip/high_frac per arm.

Usage: python bench/recipe_claims.py runs/learning_curve runs/clip_higher_entropy
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from zoo.study.report.intervals import difference

SEEDS = range(5)


def metrics(run: Path) -> list[dict]:
    """The per-step records of a run (no evaluation records)."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if "reward/total" in r]


def per_seed(root: Path, arm: str, value) -> dict[int, float]:
    """{seed: value(records)} over the seeds whose run folder exists."""
    return {s: value(metrics(root / f"{arm}-s{s}")) for s in SEEDS if finished(root / f"{arm}-s{s}")}


def finished(run: Path) -> bool:
    try:
        return json.loads((run / "summary.json").read_text()).get("status") == "finished"
    except OSError:
        return False


def mean_of(key: str, first: int = 1, last: int = 12):
    def f(recs: list[dict]) -> float:
        xs = [float(r[key]) for r in recs if first <= r["step"] <= last and key in r]
        xs = [x for x in xs if math.isfinite(x)]
        return float(np.mean(xs)) if xs else float("nan")

    return f


def gap(recs: list[dict]) -> float:
    """len_incorrect - len_correct over steps 7-12 (steps where both are logged)."""
    d = [
        r["completion/len_incorrect"] - r["completion/len_correct"]
        for r in recs
        if 7 <= r["step"] <= 12 and "completion/len_incorrect" in r and "completion/len_correct" in r
    ]
    d = [x for x in d if math.isfinite(x)]
    return float(np.mean(d)) if d else float("nan")


def t_interval(values: dict[int, float]) -> str:
    x = np.asarray([v for v in values.values() if math.isfinite(v)])
    if len(x) < 2:
        return f"n={len(x)}: no interval"
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return f"{x.mean():+.3f} [{x.mean() - half:+.3f}, {x.mean() + half:+.3f}] (n={len(x)})"


def diff(a: dict[int, float], b: dict[int, float]) -> str:
    d = difference(a, b, paired=True)
    if d.low is None:
        return f"{d.pairs} pairs: no interval"
    return f"{d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}] ({d.pairs} pairs, {d.verdict}; seeds for 80% power {d.seeds_needed})"


def main(lc: Path, che: Path) -> None:
    for obj in ("correctness", "format"):
        key = f"adv/corr/{obj}"
        mo, gr = per_seed(lc, "mo_grpo", mean_of(key)), per_seed(lc, "grpo", mean_of(key))
        print(f"{key}: grpo {t_interval(gr)}  mo_grpo {t_interval(mo)}  mo_grpo - grpo {diff(mo, gr)}")
    gr, dr = per_seed(lc, "grpo", gap), per_seed(lc, "dr_grpo", gap)
    print(
        f"len_incorrect - len_correct, steps 7-12: grpo {t_interval(gr)}  dr_grpo {t_interval(dr)}  dr_grpo - grpo {diff(dr, gr)}"
    )
    for first, last in ((7, 12), (1, 12)):
        da = per_seed(lc, "dapo", mean_of("entropy", first, last))
        sy = per_seed(che, "dapo-symmetric", mean_of("entropy", first, last))
        print(
            f"entropy steps {first}-{last}: dapo {t_interval(da)}  symmetric {t_interval(sy)}  dapo - symmetric {diff(da, sy)}"
        )
    for root, arm in ((lc, "dapo"), (che, "dapo-symmetric")):
        hi = [
            float(r["clip/high_frac"])
            for s in SEEDS
            if finished(root / f"{arm}-s{s}")
            for r in metrics(root / f"{arm}-s{s}")
        ]
        hi = [x for x in hi if math.isfinite(x)]
        if hi:
            print(f"clip/high_frac {arm}: {min(hi):.4f}-{max(hi):.4f}, mean {np.mean(hi):.4f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
