"""The report's signal per group and the guard warnings per arm: for each arm the fraction of groups
that carried signal (metrics groups/signal_frac and groups/correct_signal_frac, zoo.step.scoring.
signal_metrics) per step and its mean, beside training accuracy, and the arms whose runs got a warning
for little signal or divergence (summary.json's guards/<warning>_step, zoo.core.watch)."""

from __future__ import annotations

import statistics

from zoo.study.report.runs import ArmGroup, RunData
from zoo.study.report.stats import fmt_ms

#: the warnings zoo.core.watch records in summary.json (guards/<name>_step) -> their marker in the report
MARKS = {"low_signal": "low signal", "entropy_rise": "diverged: entropy", "kl_jump": "diverged: KL"}
#: the most per-step values a cell shows; longer runs show means over equal windows of steps
MAX_SHOWN = 20

SIGNAL_TEXT = (
    "A group whose completions all scored alike (all wrong, or all right) has group-relative advantages of 0 "
    "and teaches nothing (GRPO's (r - mean) / std, Shao et al. 2024, arXiv:2402.03300; DAPO's dynamic sampling "
    "drops such groups, Yu et al. 2025, arXiv:2503.14476). *reward signal*: the fraction of groups whose "
    "weighted reward varied (`groups/signal_frac`); *correct signal*: the fraction whose correctness varied, "
    "some answer right and some wrong (`groups/correct_signal_frac`, only with a `correctness` reward: a format "
    "or length reward can make a group vary while no answer in it is right). Both over every group of a step's "
    "first round, before any filter; the means over steps are mean ± std over seeds. *per step*: the correct "
    "signal (else the reward signal) and the training accuracy at each step, means over seeds{windows}."
)
LEGEND = (
    'Warnings (the run went on; docs/reference/guards.md "Guards"): *low signal*: more than half of the groups '
    "carried no correctness signal for {steps} consecutive steps (try a larger `budget.group_size`, an easier "
    "task or few-shot, a higher `sampling.temperature`); *diverged: entropy*: the policy's entropy rose above "
    "{rise:g}x its start; *diverged: KL*: `kl/ref` jumped (above {kl:g} nats per token or {jump:g}x its recent "
    "value). Each with the step of the warning and the seeds that got it."
)


def run_marks(run: RunData) -> dict[str, int]:
    """The warnings a run got: marker -> the step (from its summary.json)."""
    out = {}
    for name, mark in MARKS.items():
        v = run.summary.get(f"guards/{name}_step")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[mark] = int(v)
    return out


def arm_marks(g: ArmGroup) -> str:
    """e.g. "low signal (step 3; 2 of 3 seeds)"; "-" when no run of the arm got a warning."""
    got: dict[str, list[int]] = {}
    for r in g.runs:
        for mark, step in run_marks(r).items():
            got.setdefault(mark, []).append(step)
    parts = []
    for mark, steps in got.items():
        where = f"step {min(steps)}" if len(set(steps)) == 1 else f"steps {min(steps)}-{max(steps)}"
        parts.append(f"{mark} ({where}; {len(steps)} of {len(g.runs)} seeds)")
    return "; ".join(parts) or "-"


def signal_key(run: RunData) -> str | None:
    """The run's step signal: groups/correct_signal_frac where logged, else groups/signal_frac, else None."""
    return next((k for k in ("groups/correct_signal_frac", "groups/signal_frac") if run.series(k)), None)


def mean_over_steps(run: RunData, key: str | None) -> float | None:
    s = run.series(key) if key else {}
    return statistics.fmean(s.values()) if s else None


def per_step(runs: list[RunData], key: str | None = None) -> str:
    """The mean over `runs` at each step of `key` (None: each run's `signal_key`), as "0.50 0.25 ...";
    more than MAX_SHOWN steps are shown as means over MAX_SHOWN equal windows; "-" when none is logged."""
    by_step: dict[int, list[float]] = {}
    for r in runs:
        for step, v in r.series(key or signal_key(r) or "").items():
            by_step.setdefault(step, []).append(v)
    vals = [statistics.fmean(by_step[s]) for s in sorted(by_step)]
    if len(vals) > MAX_SHOWN:
        edges = [round(i * len(vals) / MAX_SHOWN) for i in range(MAX_SHOWN + 1)]
        vals = [statistics.fmean(vals[a:b]) for a, b in zip(edges, edges[1:])]
    return " ".join(f"{v:.2f}" for v in vals) or "-"


def signal_rows(groups: list[ArmGroup]) -> tuple[list[str], list[list[str]]]:
    """The section's table: (header, one row per arm), over each arm's runs that did not fail."""
    header = [
        "arm",
        "reward signal (mean)",
        "correct signal (mean)",
        "signal per step",
        "accuracy (mean)",
        "accuracy per step",
        "warnings",
    ]
    rows = []
    for g in groups:
        ok = g.ok_runs
        rows.append(
            [
                g.name,
                fmt_ms(mean_over_steps(r, "groups/signal_frac") for r in ok),
                fmt_ms(mean_over_steps(r, "groups/correct_signal_frac") for r in ok),
                per_step(ok),
                fmt_ms(mean_over_steps(r, "accuracy") for r in ok),
                per_step(ok, "accuracy"),
                arm_marks(g),
            ]
        )
    return header, rows


def signal_section(groups: list[ArmGroup]) -> tuple[str, str, list[str], list[list[str]]] | None:
    """(text, legend, header, rows) for report.md; None when no run logged a signal or got a warning
    (runs from before these metrics)."""
    from zoo.core import watch

    runs = [r for g in groups for r in g.runs]
    if not any(signal_key(r) or run_marks(r) for r in runs):
        return None
    longest = max((len(r.series(signal_key(r) or "")) for r in runs), default=0)
    windows = f" (over {MAX_SHOWN} equal windows of the {longest} steps)" if longest > MAX_SHOWN else ""
    legend = LEGEND.format(steps=watch.LOW_SIGNAL_STEPS, rise=watch.ENTROPY_RISE, kl=watch.KL_LIMIT, jump=watch.KL_JUMP)
    return SIGNAL_TEXT.format(windows=windows), legend, *signal_rows(groups)
