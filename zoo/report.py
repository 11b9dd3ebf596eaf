"""`zoo report runs/<study>`: a side-by-side table (report.md + terminal) and PNG plots of a study.

Input: the study folder, with one folder per arm run holding `metrics.jsonl` (one JSON object per
step: "step", "reward/total", "reward/<objective>", "accuracy", "kl/ref", "entropy",
"completion/len_mean", "clip/low_frac", "clip/high_frac", "count/completions" (completions generated
so far, cumulative), "time/step", "time/elapsed" (seconds since the start), "perf/peak_mem_mb"; eval
records with "eval/greedy_acc"), `summary.json` ("status", "error", "eval/before", "eval/after",
"config") and `config.yaml`; `study.json` (optional) gives the arm order.

Damaged files never stop a report: unreadable metrics lines (cut by a crash, not UTF-8) are skipped and
counted, and each problem is a warning naming the file (terminal and report.md). A finished run's
final numbers come from its summary.json (written once at the end), not from the last metrics line.

Runs whose labels differ only by the `-s<seed>` suffix form one arm: numbers are mean +- sample std
(n-1) over its seeds that did not fail, curves are the mean over seeds (band: +- std).
Output: `report.md`, `plots/*.png` (linked from report.md) and the table printed with rich.
"""
from __future__ import annotations

import logging
import math
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from zoo.study_checks import foreign_arm_dir
from zoo.tracking import read_json, read_jsonl, read_jsonl_counted

_SEED_SUFFIX = re.compile(r"-s(-?\d+)$")
DIAGNOSTICS = [("accuracy", "train accuracy"), ("eval/greedy_acc", "eval greedy accuracy"), ("kl/ref", "KL to reference"),
               ("entropy", "entropy"), ("completion/len_mean", "completion length (tokens)"),
               ("clip/low_frac", "clip fraction (low)"), ("clip/high_frac", "clip fraction (high)")]


class ReportError(ValueError):
    """The folder holds nothing to report on; the message names it."""


@dataclass
class RunData:
    """One arm run (one seed) read from its folder."""

    label: str
    dir: Path
    records: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any]
    seed: int | None = None
    status: str = "pending"
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def group(self) -> str:
        return _SEED_SUFFIX.sub("", self.label)

    def series(self, key: str) -> dict[int, float]:
        """step -> value of `key` (finite numbers; the last record of a step wins)."""
        out: dict[int, float] = {}
        for r in self.records:
            v, s = r.get(key), r.get("step")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and isinstance(s, (int, float)):
                out[int(s)] = float(v)
        return dict(sorted(out.items()))


@dataclass
class ArmGroup:
    """The runs (seeds) of one arm."""

    name: str
    runs: list[RunData] = field(default_factory=list)

    @property
    def ok_runs(self) -> list[RunData]:
        """The seeds the numbers use: all but failed runs."""
        return [r for r in self.runs if r.status != "failed"]


# --------------------------------------------------------------------------- reading


def load_run(d: Path) -> RunData:
    """Read one arm folder (missing files give empty records / dicts; damaged ones add a warning
    naming the file to `RunData.warnings`)."""
    summ = read_json(d / "summary.json")
    cfg = _read_yaml(d / "config.yaml")
    recs, skipped = read_jsonl_counted(d / "metrics.jsonl")
    warnings = [f"{d / f}: unreadable, ignored" for f, data in (("summary.json", summ), ("config.yaml", cfg))
                if (d / f).is_file() and not data]
    if skipped:
        warnings.append(f"{d / 'metrics.jsonl'}: skipped {skipped} unreadable line(s) (cut by a crash, or not UTF-8 JSON)")
    status = summ.get("status") if summ.get("status") in ("finished", "failed") else ("unfinished" if recs else "pending")
    steps = [int(r["step"]) for r in recs if isinstance(r.get("step"), (int, float)) and "reward/total" in r]
    if status == "finished" and isinstance(summ.get("steps"), int) and max(steps, default=0) < summ["steps"]:
        warnings.append(f"{d / 'metrics.jsonl'}: ends at step {max(steps, default=0)} but summary.json records "
                        f"{summ['steps']} steps (file cut?); final numbers are summary.json's, curves stop early")
    m = _SEED_SUFFIX.search(d.name)
    seed = cfg.get("seed", int(m.group(1)) if m else None)
    return RunData(d.name, d, recs, summ, cfg, seed, status, summ.get("error"), warnings)


def _read_yaml(p: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: not UTF-8
        return {}
    return data if isinstance(data, dict) else {}


def discover(study_dir: Path) -> list[RunData]:
    """Every arm run under study_dir (folders with metrics.jsonl, summary.json or config.yaml), in
    study.json order when present, then by name; arms listed in study.json without a folder are
    'pending'; arm folders of another study (a symlink out of study_dir) are left out with a warning.
    A folder that is itself a run gives a one-run report. Raises ReportError if none."""
    study_dir = Path(study_dir)
    if not study_dir.is_dir():
        raise ReportError(f"{study_dir}: no such folder (expected runs/<study>)")
    marker = ("metrics.jsonl", "summary.json", "config.yaml")
    if (study_dir / "metrics.jsonl").exists():
        return [load_run(study_dir)]
    dirs = {d.name: d for d in sorted(study_dir.iterdir()) if d.is_dir() and any((d / m).exists() for m in marker)}
    own = read_json(study_dir / "study.json").get("name")
    foreign = {label: why for label, d in dirs.items() if (why := foreign_arm_dir(study_dir, d, own))}
    for why in foreign.values():  # a symlinked arm of another study is not this study's result
        logging.getLogger(__name__).warning("report %s: left out %s", study_dir, why)
    order = [a.get("label") for a in read_json(study_dir / "study.json").get("arms", []) if a.get("label")]
    names = [n for n in dict.fromkeys(order + sorted(dirs)) if n not in foreign]
    runs = [load_run(dirs.get(n, study_dir / n)) for n in names]
    if not runs:
        raise ReportError(f"{study_dir}: no arm folders (with metrics.jsonl, summary.json or config.yaml)")
    return runs


def group_runs(runs: Iterable[RunData]) -> list[ArmGroup]:
    """Runs grouped by label without -s<seed>, in first-seen order."""
    groups: dict[str, ArmGroup] = {}
    for r in runs:
        groups.setdefault(r.group, ArmGroup(r.group)).runs.append(r)
    return list(groups.values())


# --------------------------------------------------------------------------- numbers


def mean_std(values: Iterable[float]) -> tuple[float, float, int] | None:
    """(mean, sample std (n-1; 0 for one value), n) of the finite values, or None when there are none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


def fmt_ms(values: Iterable[float], digits: int = 3) -> str:
    """"0.450 ± 0.071" over several values, "0.450" for one, "-" for none."""
    ms = mean_std(values)
    if ms is None:
        return "-"
    m, s, n = ms
    return f"{m:.{digits}f}" if n == 1 else f"{m:.{digits}f} ± {s:.{digits}f}"


def _last(run: RunData, key: str) -> float | None:
    """The final value of `key`: a finished run's summary.json value when it has one (the metrics
    file may be cut short), else the last step's in metrics.jsonl, else the summary's."""
    v = run.summary.get(key)
    summ = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
    if run.status == "finished" and summ is not None:
        return summ
    s = run.series(key)
    return list(s.values())[-1] if s else summ


def _best(run: RunData, key: str) -> float | None:
    s = run.series(key)
    return max(s.values()) if s else None


def _mean_of(run: RunData, key: str) -> float | None:
    s = run.series(key)
    return statistics.fmean(s.values()) if s else None


def _half_mean(run: RunData, key: str, which: int) -> float | None:
    """Mean of `key` over the first (which=0) or last (which=1) floor(n/2) steps; None under 2 steps."""
    vals = list(run.series(key).values())
    h = len(vals) // 2
    if h == 0:
        return None
    return statistics.fmean(vals[:h] if which == 0 else vals[-h:])


def _peak(run: RunData, key: str = "perf/peak_mem_mb") -> float | None:
    s = run.series(key)
    return max(s.values()) if s else _last(run, key)


def eval_acc(run: RunData, when: str) -> float | None:
    """Greedy eval accuracy 'before' or 'after' training: summary["eval/<when>"], else the first /
    last eval record in metrics.jsonl."""
    d = run.summary.get(f"eval/{when}")
    if isinstance(d, dict):
        for k in ("eval/greedy_acc", "greedy_acc"):
            if isinstance(d.get(k), (int, float)):
                return float(d[k])
    s = run.series("eval/greedy_acc")
    if not s:
        return None
    return list(s.values())[0 if when == "before" else -1]


def _find(d: Any, key: str) -> Any:
    """The first non-None value of `key` in a nested dict, shallowest first."""
    queue = [d]
    while queue:
        cur = queue.pop(0)
        if isinstance(cur, dict):
            if cur.get(key) is not None:
                return cur[key]
            queue += [v for v in cur.values() if isinstance(v, (dict, list))]
        elif isinstance(cur, list):
            queue += [v for v in cur if isinstance(v, (dict, list))]
    return None


def used_values(run: RunData) -> dict[str, str]:
    """group_size, updates (epochs x minibatches), lr, max_new_tokens actually used: from the
    trainer's resolved summary["config"] when it has them, else from config.yaml (the budget wins
    over the variant, as in training)."""
    resolved = run.summary.get("config") or {}
    out = {k: _find(resolved, k) for k in ("group_size", "updates", "lr", "max_new_tokens")}
    cfg = run.config
    budget, optim = cfg.get("budget") or {}, cfg.get("optim") or {}
    out["lr"] = out["lr"] if out["lr"] is not None else optim.get("lr")
    out["max_new_tokens"] = out["max_new_tokens"] if out["max_new_tokens"] is not None else budget.get("max_new_tokens")
    for key in ("group_size", "updates"):
        if out[key] is None:
            out[key] = budget.get(key)
    if (out["group_size"] is None or out["updates"] is None) and cfg.get("variant"):
        try:
            from zoo.config.variant import load_variant

            v = load_variant(cfg["variant"], cfg.get("set") or {})
            out["group_size"] = out["group_size"] or v.group_size
            out["updates"] = out["updates"] or v.updates.model_dump()
        except Exception:  # noqa: BLE001 - a report never fails on a variant that moved
            pass
    upd = out["updates"]
    if isinstance(upd, dict):
        upd = f"{upd.get('epochs', '?')}x{upd.get('minibatches', '?')}"
    return {"group_size": _s(out["group_size"]), "updates": _s(upd), "lr": _s(out["lr"], "g"),
            "max_new_tokens": _s(out["max_new_tokens"])}


def _s(v: Any, spec: str = "") -> str:
    if v is None:
        return "-"
    return format(v, spec) if spec and isinstance(v, (int, float)) else str(v)


def _status(g: ArmGroup) -> str:
    counts: dict[str, int] = {}
    for r in g.runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    errors = [r.error for r in g.runs if r.status == "failed" and r.error]
    err = (": " + _one_line(errors[0])) if errors else ""
    if len(counts) == 1:
        st = next(iter(counts))
        return f"{st}{err}" if st == "failed" else st
    parts = [f"{n} {st}" for st, n in counts.items()]
    return ", ".join(parts) + err


def _one_line(text: str, n: int = 100) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= n else line[: n - 1] + "…"


def reward_keys(runs: Iterable[RunData]) -> list[str]:
    """Every "reward/..." objective in the runs, reward/total first (reward/failed is a count, not a reward)."""
    keys = {k for r in runs for rec in r.records for k in rec if k.startswith("reward/") and k != "reward/failed"}
    return sorted(keys, key=lambda k: (k != "reward/total", k))


def table_rows(groups: list[ArmGroup], rkeys: list[str]) -> tuple[list[str], list[list[str]]]:
    """The side-by-side table: (header, one row per arm)."""
    objectives = [k for k in rkeys if k != "reward/total"]
    header = (["arm", "seeds", "status", "final reward", "best reward", "mean reward 1st → 2nd half"]
              + [f"final {k}" for k in objectives]
              + ["accuracy", "eval greedy before → after", "time/step (s)", "peak mem (MB)",
                 "group_size", "updates", "lr", "max_new_tokens"])
    rows = []
    for g in groups:
        ok = g.ok_runs
        before, after = fmt_ms(eval_acc(r, "before") for r in ok), fmt_ms(eval_acc(r, "after") for r in ok)
        used = used_values(g.runs[0])
        rows.append(
            [g.name, ",".join(str(r.seed) for r in g.runs), _status(g),
             fmt_ms(_last(r, "reward/total") for r in ok), fmt_ms(_best(r, "reward/total") for r in ok),
             f"{fmt_ms(_half_mean(r, 'reward/total', 0) for r in ok)} → {fmt_ms(_half_mean(r, 'reward/total', 1) for r in ok)}"]
            + [fmt_ms(_last(r, k) for r in ok) for k in objectives]
            + [fmt_ms(_last(r, "accuracy") for r in ok), f"{before} → {after}",
               fmt_ms((_mean_of(r, "time/step") for r in ok), 2), fmt_ms((_peak(r) for r in ok), 0)]
            + [used["group_size"], used["updates"], used["lr"], used["max_new_tokens"]]
        )
    return header, rows


# --------------------------------------------------------------------------- plots


def _mean_curve(runs: list[RunData], y: Callable[[RunData], dict[int, float]],
                x: Callable[[RunData], dict[int, float]] | None) -> tuple[list[float], list[float], list[float]]:
    """x, mean y, std y over seeds at every step where some seed has both x and y."""
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
    ysd = [statistics.stdev(per_step[s][1]) if len(per_step[s][1]) > 1 else 0.0 for s in steps]
    return xm, ym, ysd


def _new_figure(n: int, ncols: int = 3) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.6 * ncols, 3.4 * nrows), layout="constrained")
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(n)]
    return fig, axes


def plot_curves(groups: list[ArmGroup], keys: list[tuple[str, str]], path: Path, xlabel: str,
                x: Callable[[RunData], dict[int, float]] | None) -> Path | None:
    """One subplot per (metric, title), one line per arm (mean over seeds, band +- std).
    x: step -> x value per run (None: the step). Returns the PNG path, or None with nothing to plot."""
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
    for ax, (key, title, curves) in zip(axes, panels):
        for name, xs, ys, sd in curves:
            (line,) = ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=name, color=colour[name])
            if any(sd):
                ax.fill_between(xs, [a - b for a, b in zip(ys, sd)], [a + b for a, b in zip(ys, sd)],
                                color=line.get_color(), alpha=0.15, linewidth=0)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
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


def make_plots(groups: list[ArmGroup], out: Path) -> list[tuple[str, Path]]:
    """Every plot with data: (title, png path)."""
    rk = reward_keys(r for g in groups for r in g.runs)
    rpanels = [(k, k) for k in rk]
    made = [
        ("Reward vs step", plot_curves(groups, rpanels, out / "reward_vs_step.png", "step", None)),
        ("Reward vs completions generated", plot_curves(groups, rpanels, out / "reward_vs_completions.png",
                                                        "completions generated", lambda r: r.series("count/completions"))),
        ("Reward vs wall time", plot_curves(groups, rpanels, out / "reward_vs_time.png", "wall time (s)",
                                            lambda r: r.series("time/elapsed"))),
        ("Eval accuracy before / after", plot_eval(groups, out / "eval_accuracy.png")),
        ("Training dynamics", plot_curves(groups, DIAGNOSTICS, out / "training_dynamics.png", "step", None)),
    ]
    return [(t, p) for t, p in made if p is not None]


# --------------------------------------------------------------------------- output


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def markdown(name: str, header: list[str], rows: list[list[str]], plots: list[tuple[str, Path]],
             runs: list[RunData], base: Path) -> str:
    """report.md text: the table, the plots (relative links) and the failed runs."""
    lines = [f"# Study `{name}`", "",
             f"{len(rows)} arm(s), {len(runs)} run(s); generated {time.strftime('%Y-%m-%d %H:%M:%S')}.", "",
             "Numbers are mean ± sample std (n−1) over the seeds that did not fail; *final* is the last "
             "training step, *best* the maximum over steps; *1st → 2nd half* the mean reward over the first and "
             "the last half of the steps (learning shows as a rise); time/step is the mean step time; "
             "group_size, updates (epochs x minibatches), lr and max_new_tokens are the values used.", "",
             "| " + " | ".join(map(_md_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
    for title, p in plots:
        lines += ["", f"## {title}", "", f"![{title}]({p.relative_to(base).as_posix()})"]
    warned = [w for r in runs for w in r.warnings]
    if warned:
        lines += ["", "## Warnings", ""] + [f"- {_md_cell(w)}" for w in warned]
    failed = [r for r in runs if r.status == "failed"]
    if failed:
        lines += ["", "## Failed runs", ""]
        lines += [f"- `{r.label}`: {_md_cell(_one_line(r.error or 'no error recorded', 300))}" for r in failed]
    lines += ["", "## Runs", ""]
    lines += [f"- `{r.label}`: {r.status}, {len(r.series('reward/total'))} step(s), `{r.dir.relative_to(base).as_posix() if r.dir.is_relative_to(base) else r.dir}`"
              for r in runs]
    return "\n".join(lines) + "\n"


SHORT = {"final reward": "final R", "best reward": "best R", "mean reward 1st → 2nd half": "R 1st → 2nd half", "accuracy": "acc", "time/step (s)": "s/step",
         "peak mem (MB)": "peak MB", "eval greedy before → after": "eval before → after", "group_size": "G",
         "updates": "upd", "max_new_tokens": "tokens"}


def print_table(name: str, header: list[str], rows: list[list[str]], console: Any = None) -> None:
    """The side-by-side table in the terminal (rich, short headers; errors listed below the table).
    Without a console: a rich Console at least 200 columns wide when stdout is not a terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
    if not console.is_terminal:  # a log file or pipe: do not squeeze the table to 80 columns
        console = Console(file=console.file, width=max(console.width, 200))
    t = Table(title=f"study {name}", box=box.SIMPLE_HEAD, pad_edge=False)
    for i, h in enumerate(header):
        t.add_column(SHORT.get(h, h.replace("final reward/", "final ")), style="bold cyan" if i == 0 else None,
                     no_wrap=True, min_width=max(len(r[0]) for r in rows) if i == 0 and rows else None)
    status_col = header.index("status")
    errors = []
    for row in rows:
        cells = list(row)
        if ": " in cells[status_col]:
            cells[status_col], err = cells[status_col].split(": ", 1)
            errors.append(f"{row[0]}: {err}")
        t.add_row(*cells)
    console.print(t)
    for e in errors:
        console.print(f"[red]failed[/] {e}", highlight=False)


def check_same_config(groups: list[ArmGroup]) -> None:
    """Refuse to average seeds of an arm trained with different configs (other than the seed).

    Raises ReportError naming the arm, its runs and the differing keys (zoo.fingerprint)."""
    from zoo.fingerprint import mixed_keys, read_record

    for g in groups:
        fields = {r.label: read_record(r.dir) for r in g.runs}
        keys = mixed_keys(fields)
        if keys:
            raise ReportError(f"arm {g.name}: its seeds ({', '.join(fields)}) were trained with different configs "
                              f"({', '.join(keys)}), so they are not averaged; retrain the odd ones with "
                              f"`zoo ablate STUDY --fresh LABEL`")


def write_report(study_dir: Path | str, console: Any = None) -> Path:
    """Write `<study_dir>/report.md` and `<study_dir>/plots/*.png`, print the table; returns report.md.

    Raises ReportError when study_dir does not exist or holds no arm folder, or when the seeds of
    one arm were trained with different configs (`check_same_config`)."""
    study_dir = Path(study_dir)
    runs = discover(study_dir)
    groups = group_runs(runs)
    check_same_config(groups)
    name = read_json(study_dir / "study.json").get("name") or study_dir.name
    header, rows = table_rows(groups, reward_keys(runs))
    plots = make_plots(groups, study_dir / "plots")
    out = study_dir / "report.md"
    out.write_text(markdown(name, header, rows, plots, runs, study_dir), encoding="utf-8")
    print_table(name, header, rows, console)
    if any(r.warnings for r in runs):
        from rich.console import Console
        from rich.markup import escape

        for w in (w for r in runs for w in r.warnings):
            (console or Console(stderr=True)).print(f"[yellow]warning:[/] {escape(w)}", highlight=False, soft_wrap=True)
    return out
