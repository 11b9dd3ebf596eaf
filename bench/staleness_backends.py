# Feeds docs/results/staleness.md, "Real workers against simulated staleness" (experiments/staleness_backends.yaml).
"""Real rollout workers (thread, Ray) against simulated staleness at the same bound k, and the synchronous step.

For each arm `<correction>-<backend>` of the study, over the seeds: the staleness the workers reached (mean
over steps of `async/staleness_mean`; the share of steps whose staleness is exactly the simulated min(s - 1,
k)), the logged reward of steps 1 .. S (reward against optimizer steps, as a real asynchronous run sees it),
its per-seed difference from `<correction>-simulated` with a 95% bootstrap interval over seeds (10 000
resamples, numpy's default_rng(0)), the steps whose reward equals the simulated run's exactly, and the wall
time (`time/elapsed` at the last step). With `--plot PNG`: reward against optimizer step and against wall
time, mean over seeds with a 95% t band (the report's `ci_half_width`).

Usage: python bench/staleness_backends.py runs/staleness_backends [--steps 20] [--plot docs/img/x.png]
"""

import argparse
import json
from pathlib import Path

import numpy as np

from zoo.study.report.plots import ci_half_width

KEY = "reward/arm_bernoulli"


def series(run: Path, key: str) -> np.ndarray:
    """The per-step values of `key` in run/metrics.jsonl, NaN where a step did not log it; [steps]."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("step", 0) >= 1 and KEY in r]
    return np.array([r.get(key, np.nan) for r in rows], dtype=float)


def boot(d: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    lo, hi = np.percentile(rng.choice(d, (10_000, len(d))).mean(1), [2.5, 97.5])
    return float(lo), float(hi)


def row(root: Path, arm: str, seeds: list[str], steps: int, k: int, rng: np.random.Generator) -> str:
    corr = arm.rsplit("-", 1)[0]
    runs = [root / f"{arm}-s{s}" for s in seeds]
    sims = [root / f"{corr}-simulated-s{s}" for s in seeds]
    rew = np.array([series(r, KEY)[:steps].mean() for r in runs])  # [seeds]
    cells = [arm, f"{rew.mean():.3f}"]
    if arm.endswith("-sync"):
        cells += ["-", "-", "-", "-"]
    else:
        st = [series(r, "async/staleness_mean") for r in runs]  # seeds x [S]
        exact = np.mean([np.mean(s == np.minimum(np.arange(len(s)), k)) for s in st])
        d = rew - np.array([series(r, KEY)[:steps].mean() for r in sims])
        same = np.mean([np.mean(series(a, KEY) == series(b, KEY)) for a, b in zip(runs, sims)])
        lo, hi = boot(d, rng)
        cells += [f"{np.mean([s.mean() for s in st]):.2f}", f"{exact:.0%}", f"{d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}]"]
        cells += [f"{same:.0%}"]
    wall = np.array([series(r, "time/elapsed")[-1] for r in runs])
    return "| " + " | ".join([*cells, f"{wall.mean():.1f}"]) + " |"


def band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over seeds and the 95% t half-width; curves [seeds, S]."""
    return curves.mean(0), np.array([ci_half_width(list(col)) for col in curves.T])


def plot(root: Path, arms: list[str], seeds: list[str], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for arm in arms:
        r = np.array([series(root / f"{arm}-s{s}", KEY) for s in seeds])  # [seeds, S]
        t = np.array([series(root / f"{arm}-s{s}", "time/elapsed") for s in seeds]).mean(0)  # [S]
        m, h = band(r)
        x = np.arange(1, len(m) + 1)
        for ax, xs in zip(axes, (x, t)):
            (line,) = ax.plot(xs, m, label=arm, ls="--" if "bypass" in arm else "-")
            ax.fill_between(xs, m - h, m + h, alpha=0.15, color=line.get_color())
    axes[0].set(xlabel="optimizer step", ylabel="reward (mean over seeds, 95% t band)")
    axes[1].set(xlabel="wall time, s (mean over seeds)")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{root.name}: {len(seeds)} seeds, k = 4")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--plot", type=Path)
    a = ap.parse_args()
    runs = sorted(p for p in a.root.iterdir() if (p / "metrics.jsonl").is_file())
    arms = sorted({p.name.rsplit("-s", 1)[0] for p in runs})
    seeds = sorted({p.name.rsplit("-s", 1)[1] for p in runs})
    rng = np.random.default_rng(0)
    print(
        f"| arm | reward, steps 1-{a.steps} | staleness mean | steps at min(s - 1, k) | vs simulated [95% CI] "
        "| steps equal to simulated | wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for arm in arms:
        print(row(a.root, arm, seeds, a.steps, a.k, rng))
    if a.plot:
        plot(a.root, arms, seeds, a.plot)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
