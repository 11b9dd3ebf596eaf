"""The report's PNG plots: reward against step, completions generated and wall time, eval accuracy
before / after, the training dynamics and the mechanism diagnostics (adv/corr/*, length by
correctness, gold rewards) and, where a gold reward is logged, proxy and gold reward against
sqrt(KL to the reference) as Gao et al. plot reward hacking; one line per arm: the mean over seeds with its 95% confidence band
(Student's t interval of the mean at each step, scipy.stats.t; no band for one seed)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable

from zoo.study.report.runs import ArmGroup, RunData
from zoo.study.report.stats import eval_acc, mean_std, reward_keys

DIAGNOSTICS = [
    ("accuracy", "train accuracy"),
    ("eval/greedy_acc", "eval greedy accuracy"),
    ("kl/ref", "KL to reference"),
    ("entropy", "entropy"),
    ("completion/len_mean", "completion length (tokens)"),
    ("clip/low_frac", "clip fraction (low)"),
    ("clip/high_frac", "clip fraction (high)"),
    ("rollout/mismatch_kl", "sampler mismatch KL (k3)"),
    ("async/staleness_mean", "staleness (versions behind; async)"),
    ("rollout/weight_mean", "rollout correction weight (mean)"),
    ("rollout/masked_frac", "tokens masked by the rollout correction"),  # rollout/*: only where logged
    ("clip/selected_frac", "tokens selected by clip_cov / kl_cov"),
    ("entropy_bonus/coef", "entropy bonus coefficient"),
]


def ci_half_width(values: list[float]) -> float:
    """Half the width of the 95% t interval of the mean of `values`: t_{0.975, n-1} s / sqrt(n)
    (s: sample std); 0 for fewer than two values."""
    from scipy import stats as sps

    n = len(values)
    if n < 2:
        return 0.0
    return float(sps.t.ppf(0.975, n - 1)) * statistics.stdev(values) / math.sqrt(n)


def _mean_curve(
    runs: list[RunData], y: Callable[[RunData], dict[int, float]], x: Callable[[RunData], dict[int, float]] | None
) -> tuple[list[float], list[float], list[float]]:
    """x, mean y and the half width of its 95% interval over seeds (`ci_half_width`) at every step
    where some seed has both x and y."""
    per_step: dict[int, tuple[list[float], list[float]]] = {}
    for r in runs:
        ys, xs = y(r), (x(r) if x else None)
        for s, v in ys.items():
            xv = float(s) if xs is None else xs.get(s)
            if xv is not None:
                xl, yl = per_step.setdefault(s, ([], []))
                xl.append(xv)
                yl.append(v)
    steps = sorted(per_step)
    xm = [statistics.fmean(per_step[s][0]) for s in steps]
    ym = [statistics.fmean(per_step[s][1]) for s in steps]
    ysd = [ci_half_width(per_step[s][1]) for s in steps]
    return xm, ym, ysd


def _new_figure(n: int, ncols: int = 3) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.6 * ncols, 3.4 * nrows), layout="constrained")
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(n)]
    return fig, axes


def plot_curves(
    groups: list[ArmGroup],
    keys: list[tuple[str, str]],
    path: Path,
    xlabel: str,
    x: Callable[[RunData], dict[int, float]] | None,
    scatter: bool = False,
) -> Path | None:
    """One subplot per (metric, title), one line per arm (mean over seeds, 95% band).
    x: step -> x value per run (None: the step). scatter: points with 95% error bars instead of lines
    and bands, for an x that does not grow with the step (the KL). Returns the PNG path, or None with
    nothing to plot."""
    panels = []
    for key, title in keys:
        curves = [(g.name, *_mean_curve(g.ok_runs or g.runs, lambda r, k=key: r.series(k), x)) for g in groups]
        curves = [c for c in curves if c[1]]
        if curves:
            panels.append((key, title, curves))
    if not panels:
        return None
    fig, axes = _new_figure(len(panels))
    colour = {g.name: f"C{i % 10}" for i, g in enumerate(groups)}  # one colour per arm in every panel
    for ax, (_key, title, curves) in zip(axes, panels):
        for name, xs, ys, sd in curves:
            if scatter:
                ax.errorbar(
                    xs,
                    ys,
                    yerr=sd if any(sd) else None,
                    fmt="o",
                    ms=3,
                    capsize=2,
                    alpha=0.8,
                    label=name,
                    color=colour[name],
                )
                continue
            (line,) = ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=name, color=colour[name])
            if any(sd):
                ax.fill_between(
                    xs,
                    [a - b for a, b in zip(ys, sd)],
                    [a + b for a, b in zip(ys, sd)],
                    color=line.get_color(),
                    alpha=0.15,
                    linewidth=0,
                )
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        if x is None:  # steps are whole numbers: no 1.5 ticks
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes:
        ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_eval(groups: list[ArmGroup], path: Path) -> Path | None:
    """Bars of greedy eval accuracy before and after training per arm (error bars: std over seeds)."""
    data = []
    for g in groups:
        b = mean_std(eval_acc(r, "before") for r in g.ok_runs)
        a = mean_std(eval_acc(r, "after") for r in g.ok_runs)
        if b or a:
            data.append((g.name, b or (math.nan, 0.0, 0), a or (math.nan, 0.0, 0)))
    if not data:
        return None
    fig, (ax,) = _new_figure(1)
    fig.set_size_inches(max(5.0, 1.3 * len(data) + 2), 3.8)
    xs = list(range(len(data)))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [d[1][0] for d in data], w, yerr=[d[1][1] for d in data], label="before", capsize=3)
    ax.bar([x + w / 2 for x in xs], [d[2][0] for d in data], w, yerr=[d[2][1] for d in data], label="after", capsize=3)
    ax.set_xticks(xs, [d[0] for d in data], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("greedy accuracy")
    ax.set_title("eval accuracy before / after training")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


MECHANISM_PREFIXES = (
    "adv/corr/",
    "completion/len_correct",
    "completion/len_incorrect",
    "completion/len_reward_corr",
    "gold/",
)


def mechanism_panels(groups: list[ArmGroup]) -> list[tuple[str, str]]:
    """(key, title) of every mechanism diagnostic the runs logged (zoo/step/diagnostics.py), sorted."""
    keys = {k for g in groups for r in g.runs for rec in r.records for k in rec if k.startswith(MECHANISM_PREFIXES)}
    return [(k, k) for k in sorted(keys)]


def sqrt_seq_kl(r: RunData) -> dict[int, float]:
    """step -> sqrt(KL(policy || reference)) per completion, in sqrt(nats): the x axis of Gao et al.
    (arXiv 2210.10760, fig. 1). The per-sequence KL is the step's token-mean estimate `kl/ref` (the
    variant's estimator, k1 or k3: both unbiased for the token KL) times the mean completion length
    `completion/len_mean` in tokens; a negative sample estimate (k1 can be) counts as 0."""
    kl, length = r.series("kl/ref"), r.series("completion/len_mean")
    return {s: math.sqrt(max(v, 0.0) * length[s]) for s, v in kl.items() if s in length}


def not_shown_note(groups: list[ArmGroup]) -> str:
    """ " (not shown: dr_grpo, no kl/ref logged)" naming the arms that logged training steps but none of
    whose runs has a sqrt(KL) point (`sqrt_seq_kl`: no kl/ref, e.g. a variant with kl: none); "" if none.
    An arm without any step (failed at once, pending) is in no plot and not named."""
    missing = [
        g.name
        for g in groups
        if any(r.series("reward/total") for r in g.ok_runs) and not any(sqrt_seq_kl(r) for r in g.ok_runs)
    ]
    return f" (not shown: {', '.join(missing)}, no kl/ref logged)" if missing else ""


def completions_of(r: RunData) -> dict[int, float]:
    """step -> completions generated so far (count/completions): an x axis."""
    return r.series("count/completions")


def elapsed_of(r: RunData) -> dict[int, float]:
    """step -> wall time so far in seconds (time/elapsed): an x axis."""
    return r.series("time/elapsed")


def plots_over_x(
    groups: list[ArmGroup],
    keys: list[tuple[str, str]],
    out: Path,
    title: str,
    stem: str,
    by_step: tuple[str, str] | None = None,
) -> list[tuple[str, Path | None]]:
    """The panels `keys` against step, completions generated and wall time: (title, png path or None)
    each, titled "<title> vs ..." in files "<stem>_vs_{step,completions,time}.png"; by_step: another
    (title, file stem) for the plot against step."""
    step_title, step_stem = by_step or (f"{title} vs step", f"{stem}_vs_step")
    return [
        (step_title, plot_curves(groups, keys, out / f"{step_stem}.png", "step", None)),
        (
            f"{title} vs completions generated",
            plot_curves(groups, keys, out / f"{stem}_vs_completions.png", "completions generated", completions_of),
        ),
        (f"{title} vs wall time", plot_curves(groups, keys, out / f"{stem}_vs_time.png", "wall time (s)", elapsed_of)),
    ]


def plot_proxy_gold(groups: list[ArmGroup], keys: list[tuple[str, str]], out: Path) -> tuple[str, Path | None]:
    """Reward hacking: the proxy (the trained rewards) and gold rewards `keys` against the distance from
    the reference, sqrt(KL) per completion (`sqrt_seq_kl`), as points with 95% error bars."""
    return (
        "Proxy and gold reward vs sqrt(KL to reference)" + not_shown_note(groups),
        plot_curves(
            groups,
            keys,
            out / "proxy_gold_vs_sqrt_kl.png",
            "sqrt(KL to reference per completion) (sqrt nats)",
            sqrt_seq_kl,
            scatter=True,
        ),
    )


def make_plots(groups: list[ArmGroup], out: Path) -> list[tuple[str, Path]]:
    """Every plot with data: (title, png path)."""
    rpanels = [(k, k) for k in reward_keys(r for g in groups for r in g.runs)]
    made = plots_over_x(groups, rpanels, out, "Reward", "reward")
    made.append(("Eval accuracy before / after", plot_eval(groups, out / "eval_accuracy.png")))
    made += plots_over_x(
        groups, DIAGNOSTICS, out, "Training dynamics", "training_dynamics", ("Training dynamics", "training_dynamics")
    )
    mech = mechanism_panels(groups)
    made += plots_over_x(groups, mech, out, "Mechanism diagnostics", "diagnostics")
    gold = [(k, t) for k, t in mech if k.startswith("gold/")]
    if gold:  # reward hacking: proxy (the trained rewards) and gold against the distance from the reference
        made.append(plot_proxy_gold(groups, rpanels + gold, out))
    return [(t, p) for t, p in made if p is not None]
