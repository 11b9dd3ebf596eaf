"""Held-out accuracy against training steps and wall time, over seeds: the report's learning curve.

A study whose runs evaluate during training (`eval.every` > 0) has, per run, the greedy exact accuracy
at step 0 (before training), at every `eval.every` steps, and after the last step. Per arm and eval
step this module gives the mean over seeds with its 95% Student-t interval, the mean wall time at
which that evaluation happened, and the arm minus the baseline arm paired by seed (the same seed draws
the same prompts at each step in every arm) with its bootstrap interval and the seeds a difference of
that size needs (`zoo.study.report.intervals.difference`, the same rule as "Against the baseline").

Only finished runs count: a run that stopped early has no after-training point and would bias the
last step's mean. Source of the band: the t interval of a mean (scipy.stats.t), as the report's plots.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from zoo.study.report.intervals import Difference, difference
from zoo.study.report.plots import _mean_curve, _new_figure, ci_half_width
from zoo.study.report.runs import ArmGroup, RunData
from zoo.study.report.stats import eval_acc
from zoo.study.report.stats_table import fmt, fmt_ci, fmt_seeds_needed

CURVE_TEXT = (
    "Greedy exact-answer accuracy on the held-out prompts at step 0 (before training: the same model in "
    "every arm), at every `eval.every` steps and after the last step. *accuracy*: the mean over the "
    "finished seeds with its 95% t interval over seeds (training noise and evaluation noise together); "
    "*gain*: accuracy at that step minus step 0, per seed, with its 95% t interval over seeds (signed; an "
    "interval above 0 is a gain that training seeds reproduce). "
    "*wall s*: the mean elapsed training time at that step (evaluations included). *− {base}*: this arm "
    "minus the baseline, paired by seed, with its 95% bootstrap interval and the seeds a difference of "
    "this size needs for 80% power (rule as in *Against the baseline*)."
)


def accuracy_curve(run: RunData) -> dict[int, float]:
    """step -> greedy eval accuracy of one run: step 0 from the before-training eval, the mid-training
    evals at their steps, the after-training eval at the last step. {} for a run with no eval."""
    out: dict[int, float] = {}
    before = eval_acc(run, "before")
    if before is not None:
        out[0] = before
    for r in run.records:
        v, s = r.get("eval/greedy_acc"), r.get("step")
        if (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and math.isfinite(v)
            and isinstance(s, (int, float))
            and r.get("eval/phase") is None
            and s > 0
        ):
            out[int(s)] = float(v)
    after = eval_acc(run, "after")
    steps = run.series("reward/total")
    if after is not None and steps:
        out[max(steps)] = after
    return dict(sorted(out.items()))


def wall_time(run: RunData) -> dict[int, float]:
    """step -> elapsed seconds of training at that step (`time/elapsed`), 0 at step 0."""
    return {0: 0.0, **run.series("time/elapsed")}


def _finished(g: ArmGroup) -> list[RunData]:
    return [r for r in g.runs if r.status == "finished"]


def has_curve(groups: list[ArmGroup]) -> bool:
    """True when some finished run has an accuracy at a step other than 0 and the last (a mid-training eval)."""
    for g in groups:
        for r in _finished(g):
            acc, last = accuracy_curve(r), max(r.series("reward/total") or {0: 0.0})
            if any(0 < s < last for s in acc):
                return True
    return False


def curve_rows(groups: list[ArmGroup], baseline: str | None) -> tuple[list[str], list[list[str]]]:
    """The learning-curve table: one row per (arm, eval step). baseline: the arm the differences are
    taken against (None or absent: no difference columns)."""
    base = next((g for g in groups if g.name == baseline), None)
    base_curves = {r.seed: accuracy_curve(r) for r in _finished(base)} if base else {}
    header = ["arm", "step", "seeds", "accuracy", "95% CI (seeds)", "gain", "95% CI gain (seeds)", "wall s"]
    if base:
        header += [f"− {base.name}", "95% CI (paired)", "verdict", "seeds needed"]
    rows = []
    for g in groups:
        runs = _finished(g)
        curves = {r.seed: accuracy_curve(r) for r in runs}
        walls = {r.seed: wall_time(r) for r in runs}
        for step in sorted({s for c in curves.values() for s in c}):
            vals = [c[step] for c in curves.values() if step in c]
            times = [walls[k][step] for k, c in curves.items() if step in c and step in walls[k]]
            m, h = statistics.fmean(vals), ci_half_width(vals)
            row = [
                g.name,
                str(step),
                str(len(vals)),
                fmt(m),
                f"[{m - h:.3f}, {m + h:.3f}]" if len(vals) > 1 else "-",
                *_gain_cells([c[step] - c[0] for c in curves.values() if step in c and 0 in c], step),
                f"{statistics.fmean(times):.0f}" if times else "-",
            ]
            if base:
                if g is base or step == 0:  # step 0 is the same model in every arm: no difference to test
                    row += ["-", "-", "baseline" if g is base else "same model", "-"]
                else:
                    d = difference(
                        {k: c[step] for k, c in curves.items() if step in c},
                        {k: c[step] for k, c in base_curves.items() if step in c},
                        paired=True,
                    )
                    row += _diff_cells(d)
            rows.append(row)
    return header, rows


def _gain_cells(gains: list[float], step: int) -> list[str]:
    """(mean gain, its signed 95% t interval over seeds) for the per-seed gains over step 0; "-" at
    step 0 or without gains, no interval for one seed."""
    if step == 0 or not gains:
        return ["-", "-"]
    m, h = statistics.fmean(gains), ci_half_width(gains)
    return [f"{m:+.3f}", f"[{m - h:+.3f}, {m + h:+.3f}]" if len(gains) > 1 else "-"]


def _diff_cells(d: Difference) -> list[str]:
    if d.delta is None:
        return ["-", "-", d.verdict, "-"]
    ci = fmt_ci(d.low, d.high, d.pairs) if d.low is not None else "-"
    return [f"{d.delta:+.3f}", ci, d.verdict, fmt_seeds_needed(d.seeds_needed) if d.seeds_needed else "-"]


def plot_curve(groups: list[ArmGroup], path: Path) -> Path | None:
    """Two panels: held-out accuracy against step and against wall time, one line per arm (mean over
    finished seeds) with its 95% t band over seeds. Returns the PNG path, or None with no curve."""
    panels: tuple[list, list] = ([], [])  # (name, colour, x, mean, half width) per arm: vs step, vs wall time
    for i, g in enumerate(groups):
        runs = _finished(g)
        for curves, x in zip(panels, (None, wall_time)):
            xs, ys, hs = _mean_curve(runs, accuracy_curve, x)  # the report's per-step mean and 95% t band
            if len(xs) >= 2:
                curves.append((g.name, f"C{i % 10}", xs, ys, hs))
    if not panels[0]:
        return None
    fig, axes = _new_figure(2, ncols=2)
    for ax, xlabel, curves in zip(axes, ("step", "wall time (s)"), panels):
        for name, colour, xs, ys, hs in curves:
            ax.plot(xs, ys, marker="o", ms=3, label=name, color=colour)
            if any(hs):
                ax.fill_between(
                    xs,
                    [y - h for y, h in zip(ys, hs)],
                    [y + h for y, h in zip(ys, hs)],
                    color=colour,
                    alpha=0.15,
                    linewidth=0,
                )
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out greedy exact accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    from matplotlib.ticker import MaxNLocator

    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    axes[0].set_title("accuracy vs steps (mean, 95% band over seeds)")
    axes[1].set_title("accuracy vs wall time")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def curve_section(
    groups: list[ArmGroup], baseline: str | None, study_dir: Path
) -> tuple[str, list[str], list[list[str]], Path | None] | None:
    """The report section "Held-out accuracy during training": (explanation, table header, rows, plot
    written to `<study_dir>/plots/learning_curve.png` or None), or None when no run evaluated during
    training."""
    if not has_curve(groups):
        return None
    header, rows = curve_rows(groups, baseline)
    base = baseline if any(g.name == baseline for g in groups) else "the baseline"
    return CURVE_TEXT.format(base=base), header, rows, plot_curve(groups, study_dir / "plots" / "learning_curve.png")
