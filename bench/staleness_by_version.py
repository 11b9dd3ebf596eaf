# Feeds docs/results/staleness.md (experiments/staleness.yaml, `async: {backend: simulated}`).
"""Reward against the policy version, per arm of the staleness study, paired by seed with k = 0.

Under simulated staleness the groups logged at step s were sampled with version s - k, so the reward
logged at step s measures version s - k: this reads arm k's rewards at steps k .. k + V - 1 (versions
0 .. V - 1; the raw per-step curve lags every arm by k steps). Prints one markdown row per arm: mean
reward of versions 0 .. V-1 over the seeds, and the mean of the per-seed differences against the same
correction at k = 0 with a 95% bootstrap interval over seeds (10 000 resamples, numpy's default_rng(0)).

Usage: python bench/staleness_by_version.py runs/staleness [V]
"""

import json
import sys
from pathlib import Path

import numpy as np


def rewards(run: Path, key: str = "reward/arm_bernoulli") -> np.ndarray:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return np.array([r[key] for r in rows if key in r])


def main(root: Path, versions: int = 10) -> None:
    rng = np.random.default_rng(0)
    runs = sorted(p for p in root.iterdir() if (p / "metrics.jsonl").is_file())
    arms = sorted({p.name.rsplit("-s", 1)[0] for p in runs})
    seeds = sorted({p.name.rsplit("-s", 1)[1] for p in runs})
    print("| arm | k | reward of versions 0-%d | vs k = 0, same correction [95%% CI] |" % (versions - 1))
    print("|---|---|---|---|")
    for arm in arms:
        corr, k = arm.rsplit("-async.max_staleness=", 1)
        a = np.array([rewards(root / f"{arm}-s{s}")[int(k) : int(k) + versions].mean() for s in seeds])
        b = np.array([rewards(root / f"{corr}-async.max_staleness=0-s{s}")[:versions].mean() for s in seeds])
        d = a - b
        lo, hi = np.percentile(rng.choice(d, (10_000, len(d))).mean(1), [2.5, 97.5])
        print(f"| {corr} | {k} | {a.mean():.3f} | {d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}] |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 10)
