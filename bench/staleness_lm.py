# Feeds docs/results/staleness.md, "On the embedded model" (experiments/staleness_lm.yaml).
"""Simulated staleness on the embedded model: each arm against the k = 0 arm (`grpo`), paired by seed.

Per arm, over the seeds: held-out greedy accuracy at steps 6 and 12 (`eval/greedy_acc`) and its difference
from `grpo` at the same step, mean with a 95% t interval over seeds (the arms draw the same prompts at each
step); the training accuracy of policy versions 0 .. V-1 (an arm of staleness k logs version s - 1 - k at
step s, so its steps k + 1 .. k + V) against `grpo`'s steps 1 .. V; and what the lag did to the ratio:
`rollout/mismatch_kl` (KL between the sampler's and the trainer's token distributions, zoo/step/mismatch.py)
and the share of clipped tokens (`clip/low_frac + clip/high_frac`), means over steps and seeds.
An arm's k is read from its name (`-k4`; none: 0).

Usage: python bench/staleness_lm.py runs/staleness_lm [V]
"""

import json
import re
import sys
from pathlib import Path

import numpy as np

from zoo.study.report.plots import ci_half_width


def metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def at(rows: list[dict], key: str, step: int) -> float:
    return next(r[key] for r in rows if r.get("step") == step and key in r)


def steps_of(rows: list[dict], key: str) -> np.ndarray:
    """`key` at training steps 1, 2, ... (rows that have it); [S]."""
    return np.array([r[key] for r in rows if r.get("step", 0) >= 1 and key in r and "accuracy" in r], dtype=float)


def t_ci(d: np.ndarray) -> str:
    """Mean of the per-seed differences and its 95% t interval (the report's `ci_half_width`)."""
    h = ci_half_width(list(d))
    return f"{d.mean():+.3f} [{d.mean() - h:+.3f}, {d.mean() + h:+.3f}]"


def arm_row(root: Path, arm: str, seeds: list[str], versions: int) -> str:
    k = int(m.group(1)) if (m := re.search(r"-k(\d+)$", arm)) else 0
    runs = [metrics(root / f"{arm}-s{s}") for s in seeds]
    base = [metrics(root / f"grpo-s{s}") for s in seeds]
    cells = [arm, str(k)]
    for step in (6, 12):
        a = np.array([at(r, "eval/greedy_acc", step) for r in runs])  # [seeds]
        b = np.array([at(r, "eval/greedy_acc", step) for r in base])
        cells += [f"{a.mean():.3f}", "-" if arm == "grpo" else t_ci(a - b)]
    tv = np.array([steps_of(r, "accuracy")[k : k + versions].mean() for r in runs])
    tb = np.array([steps_of(r, "accuracy")[:versions].mean() for r in base])
    cells += [f"{tv.mean():.3f}", "-" if arm == "grpo" else t_ci(tv - tb)]
    kl = np.nanmean([steps_of(r, "rollout/mismatch_kl").mean() for r in runs])
    clip = np.mean([(steps_of(r, "clip/low_frac") + steps_of(r, "clip/high_frac")).mean() for r in runs])
    return "| " + " | ".join([*cells, f"{kl:.4f}", f"{clip:.3f}"]) + " |"


def main(root: Path, versions: int = 8) -> None:
    runs = sorted(p for p in root.iterdir() if (p / "metrics.jsonl").is_file())
    arms = sorted({p.name.rsplit("-s", 1)[0] for p in runs}, key=lambda a: (a != "grpo", a))
    seeds = sorted({p.name.rsplit("-s", 1)[1] for p in runs})
    print(f"{len(seeds)} seeds: {', '.join(seeds)}; 95% t intervals over seeds, paired with grpo (k = 0)")
    print(
        "| arm | k | acc step 6 | vs k = 0 | acc step 12 | vs k = 0 "
        f"| train acc of versions 0-{versions - 1} | vs k = 0 | mismatch KL | clipped tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for arm in arms:
        print(arm_row(root, arm, seeds, versions))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8)
