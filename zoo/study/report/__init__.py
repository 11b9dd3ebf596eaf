"""`zoo report runs/<study>`: a side-by-side table (report.md + terminal) and PNG plots of a study.

Input: the study folder, with one folder per arm run holding `metrics.jsonl` (one JSON object per
step: "step", "reward/total", "reward/<objective>", "accuracy", "kl/ref", "entropy",
"completion/len_mean", "clip/low_frac", "clip/high_frac", "count/completions" (completions generated
so far, cumulative), "time/step", "time/elapsed" (seconds since the start), "perf/peak_mem_mb",
"groups/signal_frac", "groups/correct_signal_frac"; eval records with "eval/greedy_acc"), `summary.json`
("status", "error", "eval/before", "eval/after", "guards/<warning>_step", "config") and `config.yaml`; `study.json` (optional) gives the arm order.

Damaged files never stop a report: unreadable metrics lines (cut by a crash, not UTF-8) are skipped and
counted, and each problem is a warning naming the file (terminal and report.md). A finished run's
final numbers come from its summary.json (written once at the end), not from the last metrics line.

Runs whose labels differ only by the `-s<seed>` suffix form one arm: numbers in the side-by-side
table are mean +- sample std (n-1) over its seeds that did not fail; the statistics tables, over its
finished seeds only (the others named under Warnings: zoo.study.report.left_out), give the IQM with a 95% bootstrap interval per metric and each arm against the baseline arm (study.json's
`baseline`, default the first arm) paired by seed (zoo.study.report.seed_stats); curves are the mean over
seeds with a 95% bootstrap band of the mean.
Output: `report.md`, `report.json` (the statistics, for scripts: `zoo report --json`), `plots/*.png`
(linked from report.md) and the tables printed with rich.
Reading the folder: zoo.study.report.runs; the numbers: zoo.study.report.stats and zoo.study.report.table; the
signal per group and the guard warnings: zoo.study.report.group_signal; the plots: zoo.study.report.plots.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from zoo.run.eval_record import read_record as read_eval_record
from zoo.run.fingerprint import mixed_keys, read_record
from zoo.study.report.console_fit import column_groups, fit_widths, longest_word, print_fitted, wide_if_piped
from zoo.study.report.curve import curve_section
from zoo.study.report.eval_delta import EVAL_DELTA_TEXT, delta_json, delta_rows
from zoo.study.report.group_signal import mean_over_steps, run_marks, signal_key, signal_section
from zoo.study.report.left_out import left_out
from zoo.study.report.left_out import messages as left_out_lines
from zoo.study.report.left_out import to_json as left_out_json
from zoo.study.report.plots import make_plots
from zoo.study.report.runs import ArmGroup, ReportError, RunData, discover, group_runs
from zoo.study.report.seed_stats import seed_statistics, to_json
from zoo.study.report.stats import reward_keys
from zoo.study.report.stats_table import compare_rows, stats_rows
from zoo.study.report.study_index import read_index
from zoo.study.report.table import one_line, table_rows
from zoo.study.report.tool_use import tool_use_lines


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(map(_md_cell, header)) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(map(_md_cell, row)) + " |" for row in rows
    ]


STATS_TEXT = (
    "Each run gives one number per metric; over an arm's seeds the table shows the interquartile mean "
    "(IQM: the mean of the middle 50%, for fewer than 4 seeds the plain mean) and its 95% percentile-bootstrap "
    "interval (scipy.stats.bootstrap, 9999 resamples, fixed seed; Agarwal et al. 2021, arXiv:2108.13264). "
    "† fewer than 5 seeds: a percentile bootstrap of 2-4 values is about [min, max] (with 2 seeds exactly "
    "the range of the two) and covers less than 95%; 5 or more seeds make it informative."
)
COMPARE_TEXT = (
    "Each arm minus the baseline arm `{base}`: the mean of the per-seed differences (paired by seed: the arms "
    "drew the same prompts at each seed and step), its 95% bootstrap interval, the probability of improvement "
    "P(arm > baseline) over all pairs of runs, and the seeds a difference of this size needs for 80% power "
    "at the observed spread, n = (z_0.975 + z_0.8)² σ_d² / δ² (∞ when δ is 0 or rounding noise, "
    "|δ| ≤ 1e-6 max(1, max |value|), below float32 resolution). *not distinguishable at this budget*: "
    "the interval holds 0. *higher† / lower† (n < 5: indicative)*: from fewer than 5 pairs the interval "
    "is about the range of the differences (with 2 pairs exactly [min d, max d], so two positive "
    "differences read higher with chance 1/4 when there is no effect): a hint, not a result. Only "
    "finished runs count (see Warnings)."
)


def markdown(
    name: str,
    header: list[str],
    rows: list[list[str]],
    plots: list[tuple[str, Path]],
    runs: list[RunData],
    base: Path,
    stats: tuple[Any, Any, str, str] | None = None,
    notes: list[str] | None = None,
    eval_delta: tuple[list[str], list[list[str]]] | None = None,
    curve: tuple[str, list[str], list[list[str]], Path | None] | None = None,
    signal: tuple[str, str, list[str], list[list[str]]] | None = None,
) -> str:
    """report.md text: the table, the statistics over seeds (`stats`: (stats table, comparison table,
    baseline name, warning)), the signal per group (`signal`: zoo.study.report.group_signal.signal_section),
    the learning curve (`curve`: zoo.study.report.curve.curve_section), the plots
    (relative links), the warnings (the runs' own, then `notes`:
    the runs left out of the statistics and the baseline's) and the failed runs."""
    lines = [
        f"# Study `{name}`",
        "",
        f"{len(rows)} arm(s), {len(runs)} run(s); generated {time.strftime('%Y-%m-%d %H:%M:%S')}.",
        "",
        "Numbers are mean ± sample std (n−1) over the seeds that did not fail; *final* is the last "
        "training step, *best* the maximum over steps; *1st → 2nd half* the mean reward over the first and "
        "the last half of the steps (learning shows as a rise); time/step is the mean step time; "
        "group_size, updates (epochs x minibatches), lr and max_new_tokens are the values used; *accuracy* is "
        "the last training step's accuracy on its sampled completions (temperature as configured), *eval greedy "
        "before → after* the held-out greedy exact accuracy before and after training; *signal* is the "
        "mean over steps of the fraction of groups that carried a correctness signal (else a reward signal) and "
        "*warnings* the guard warnings the arm's runs got (both: Signal per group, below).",
        "",
        "| " + " | ".join(map(_md_cell, header)) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
    if signal is not None:
        text, legend, sh, srows = signal
        lines += ["", "## Signal per group", "", text, "", legend, ""] + _md_table(sh, srows)
    if eval_delta is not None and eval_delta[1]:
        lines += ["", "## Held-out accuracy after − before, per prompt", "", EVAL_DELTA_TEXT, ""] + _md_table(
            *eval_delta
        )
    if stats is not None:
        (sh, srows), (ch, crows), base_name, warning = stats
        lines += ["", "## Statistics over seeds", "", STATS_TEXT, ""] + _md_table(sh, srows)
        if crows:
            lines += ["", f"## Against the baseline `{base_name}`", "", COMPARE_TEXT.format(base=base_name), ""]
            lines += ([f"Warning: {_md_cell(warning)}", ""] if warning else []) + _md_table(ch, crows)
    if curve is not None:
        text, ch, crows, png = curve
        lines += ["", "## Held-out accuracy during training", "", text, ""] + _md_table(ch, crows)
        lines += (
            []
            if png is None
            else ["", f"![held-out accuracy vs steps and wall time]({png.relative_to(base).as_posix()})"]
        )
    lines += tool_use_lines(runs)  # only when an arm ran with an environment (task.env)
    for title, p in plots:
        lines += ["", f"## {title}", "", f"![{title}]({p.relative_to(base).as_posix()})"]
    warned = [w for r in runs for w in r.warnings] + list(notes or [])
    if warned:
        lines += ["", "## Warnings", ""] + [f"- {_md_cell(w)}" for w in warned]
    failed = [r for r in runs if r.status == "failed"]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- `{r.label}`: {_md_cell(one_line(r.error or 'no error recorded', 300))}" for r in failed]
    lines += ["", "## Runs", ""]
    lines += [
        f"- `{r.label}`: {r.status}, {len(r.series('reward/total'))} step(s), `{r.dir.relative_to(base).as_posix() if r.dir.is_relative_to(base) else r.dir}`"
        for r in runs
    ]
    return "\n".join(lines) + "\n"


SHORT = {
    "final reward": "final R",
    "best reward": "best R",
    "mean reward 1st → 2nd half": "R 1st → 2nd half",
    "accuracy": "acc",
    "time/step (s)": "s/step",
    "peak mem (MB)": "peak MB",
    "eval greedy before → after": "eval before → after",
    "group_size": "G",
    "updates": "upd",
    "max_new_tokens": "tokens",
    "warnings": "warned",
}


def _split_errors(header: list[str], rows: list[list[str]]) -> tuple[list[list[str]], list[str]]:
    """(rows with the status cell cut to the status, ["arm: error"] of the failed arms)."""
    status_col = header.index("status")
    errors, cells = [], []
    for row in rows:
        row = list(row)
        if ": " in row[status_col]:
            row[status_col], err = row[status_col].split(": ", 1)
            errors.append(f"{row[0]}: {err}")
        cells.append(row)
    return cells, errors


def print_table(name: str, header: list[str], rows: list[list[str]], console: Any = None) -> None:
    """The side-by-side table in the terminal (rich, short headers; errors listed below the table).
    Never cuts a cell with "…": a console that is not a terminal gets PIPE_WIDTH columns; a terminal
    narrower than the table gets it in column groups that fit (zoo.study.report.console_fit.column_groups),
    the arm column whole in each, other cells folded between words if they must."""
    console = wide_if_piped(console)
    cells, errors = _split_errors(header, rows)
    titles = [SHORT.get(h, h.replace("final reward/", "final ")) for h in header]
    print_fitted(console, f"study {name}", titles, cells)
    for e in errors:
        console.print(f"[red]failed[/] {e}", highlight=False)


SUMMARY_COLUMNS = (
    "arm",
    "seeds",
    "status",
    "final reward",
    "mean reward 1st → 2nd half",
    "eval greedy before → after",
    "time/step (s)",
    "warnings",
)


def print_summary(name: str, header: list[str], rows: list[list[str]], console: Any = None) -> None:
    """`zoo ablate`'s closing table: one table, one row per arm, the SUMMARY_COLUMNS of the side-by-side
    table (`warnings` only when some arm got one; errors listed below it); every other column and the statistics over seeds are in report.md.
    Never cuts a cell: a narrow terminal folds cells between words (zoo.study.report.console_fit.fit_widths),
    the arm column whole, and only one too narrow for that gets column groups (the arm in each)."""
    from rich import box
    from rich.table import Table

    console = wide_if_piped(console)
    cells, errors = _split_errors(header, rows)
    keep = [header.index(h) for h in SUMMARY_COLUMNS if h in header]
    keep = [i for i in keep if header[i] != "warnings" or any(c[i] != "-" for c in cells)]  # shown when some arm warned
    titles = [SHORT.get(header[i], header[i]) for i in keep]
    cells = [[r[i] for i in keep] for r in cells]
    full = [max(len(c[j]) for c in [titles, *cells]) for j in range(len(titles))]
    least = [full[0]] + [longest_word([t] + [c[j] for c in cells]) for j, t in enumerate(titles) if j]
    for n, group in enumerate(column_groups(least, console.width)):
        cols = [0, *group]
        widths = fit_widths([full[j] for j in cols], [least[j] for j in cols], console.width) or [None] * len(cols)
        t = Table(title=f"study {name}" if n == 0 else None, box=box.SIMPLE_HEAD, pad_edge=False)
        for j, w in zip(cols, widths):
            t.add_column(titles[j], style="bold cyan" if j == 0 else None, overflow="fold", width=w, no_wrap=j == 0)
        for c in cells:
            t.add_row(*(c[j] for j in cols))
        console.print(t)
    for e in errors:
        console.print(f"[red]failed[/] {e}", highlight=False)


def print_stats(tables: tuple[Any, Any, str, str], console: Any = None) -> None:
    """The statistics over seeds and the comparisons against the baseline in the terminal (rich)."""
    console = wide_if_piped(console)  # as print_table: a log file or pipe gets the whole width
    (sh, srows), (ch, crows), base_name, warning = tables
    for title, header, rows in (
        ("IQM and 95% bootstrap CI over seeds", sh, srows),
        (f"against the baseline {base_name}", ch, crows),
    ):
        if not rows:
            continue
        # a narrow terminal gets column groups with metric and arm repeated, cells folded between words
        print_fitted(console, title, header, rows, keep=2)
    if warning:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)


def check_same_config(groups: list[ArmGroup]) -> None:
    """Refuse to average seeds of an arm trained with different configs (other than the seed).

    Raises ReportError naming the arm, its runs and the differing keys (zoo.run.fingerprint)."""
    for g in groups:
        fields = {r.label: read_record(r.dir) for r in g.runs}
        keys = mixed_keys(fields)
        if keys:
            raise ReportError(
                f"arm {g.name}: its seeds ({', '.join(fields)}) were trained with different configs "
                f"({', '.join(keys)}), so they are not averaged; retrain the odd ones with "
                f"`zoo ablate STUDY --fresh LABEL`"
            )


def write_report(study_dir: Path | str, console: Any = None, summary_only: bool = False) -> Path:
    """Write `<study_dir>/report.md` and `<study_dir>/plots/*.png`, print the tables (the side-by-side
    table and the statistics over seeds; with `summary_only` the one-row-per-arm `print_summary`
    instead, as `zoo ablate` ends); returns report.md. The files are the same either way.

    Raises ReportError when study_dir does not exist or holds no arm folder, or when the seeds of
    one arm were trained with different configs (`check_same_config`)."""
    study_dir = Path(study_dir)
    runs = discover(study_dir)
    groups = group_runs(runs)
    check_same_config(groups)
    index, damaged = read_index(study_dir)  # damaged: a warning naming study.json, its baseline kept
    name = index.get("name") or study_dir.name
    header, rows = table_rows(groups, reward_keys(runs))
    plots = make_plots(groups, study_dir / "plots")
    st, comps, warning = seed_statistics(groups, index.get("baseline"))
    base_name = comps[0].baseline if comps else (groups[0].name if groups else None)
    tables = (stats_rows(st), compare_rows(comps), base_name, warning)
    dropped = left_out(groups)
    notes = ([damaged] if damaged else []) + left_out_lines(dropped) + ([warning] if warning else [])
    out = study_dir / "report.md"
    records = [(r.label, read_eval_record(r.dir)) for r in runs]
    eval_delta = delta_rows(records)
    curve = curve_section(groups, base_name, study_dir)  # only when runs evaluated during training (eval.every)
    out.write_text(
        markdown(name, header, rows, plots, runs, study_dir, tables, notes, eval_delta, curve, signal_section(groups)),
        encoding="utf-8",
    )
    arms = [
        {
            "arm": g.name,
            "seeds": [r.seed for r in g.runs],
            "status": [r.status for r in g.runs],
            "signal_mean": [mean_over_steps(r, signal_key(r)) for r in g.runs],  # None: not logged
            "warnings": [run_marks(r) for r in g.runs],  # marker -> step (zoo.study.report.group_signal)
        }
        for g in groups
    ]
    (study_dir / "report.json").write_text(
        json.dumps(
            {
                "study": name,
                "arms": arms,
                **to_json(st, comps, base_name),
                "left_out": left_out_json(dropped),
                "warnings": notes,
                "eval_after_minus_before": delta_json(records),  # numbers; report.md has the table
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    if summary_only:
        print_summary(name, header, rows, console)
    else:
        print_table(name, header, rows, console)
        print_stats(tables, console)
    if any(r.warnings for r in runs) or dropped or damaged:
        from rich.console import Console
        from rich.markup import escape

        for w in ([damaged] if damaged else []) + [w for r in runs for w in r.warnings] + left_out_lines(dropped):
            (console or Console(stderr=True)).print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
    return out
