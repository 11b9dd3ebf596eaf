"""The report's side-by-side table: one row per arm (final, best and half-by-half reward, objectives,
accuracy, the signal per group (mean over steps, zoo.study.report.group_signal), eval before -> after,
step time, peak memory, the group_size, updates, lr and max_new_tokens the arm used, and the guard
warnings its runs got), each number mean +- std over the seeds that did not fail."""

from __future__ import annotations

import math
import statistics
from typing import Any

from zoo.study.report.group_signal import arm_marks, mean_over_steps, signal_key
from zoo.study.report.runs import ArmGroup, RunData
from zoo.study.report.stats import eval_acc, fmt_ms


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


def used_values(run: RunData) -> dict[str, str]:
    """group_size, updates (epochs x minibatches), lr, max_new_tokens actually used, in this order of
    sources: the trainer's `resolved_variant` (the variant after `set:` and the budget, as trained)
    and `optim` / `budget` of its resolved config (summary["config"], else config.yaml); for a run
    that never started, the budget, else the variant with its `set:` (the budget wins over the
    variant, as in training). A `set: {group_size: 3}` that the budget overrode is not what ran."""
    cfg = run.config
    resolved = [c for c in (run.summary.get("config"), cfg) if isinstance(c, dict)]
    out: dict[str, Any] = {"group_size": None, "updates": None, "lr": None, "max_new_tokens": None}
    for c in resolved:  # the values the trainer resolved, where it wrote them
        rv = next((c[k] for k in ("resolved_variant", "variant") if isinstance(c.get(k), dict)), {})  # older: variant
        budget = c.get("budget") if isinstance(c.get("budget"), dict) else {}
        optim = c.get("optim") if isinstance(c.get("optim"), dict) else {}
        for key, v in (
            ("group_size", rv.get("group_size")),
            ("updates", rv.get("updates")),
            ("lr", optim.get("lr")),
            ("max_new_tokens", budget.get("max_new_tokens")),
        ):
            out[key] = v if out[key] is None else out[key]
    budget = cfg.get("budget") if isinstance(cfg.get("budget"), dict) else {}
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
    return {
        "group_size": _s(out["group_size"]),
        "updates": _s(upd),
        "lr": _s(out["lr"], "g"),
        "max_new_tokens": _s(out["max_new_tokens"]),
    }


def _s(v: Any, spec: str = "") -> str:
    if v is None:
        return "-"
    return format(v, spec) if spec and isinstance(v, (int, float)) else str(v)


def _status(g: ArmGroup) -> str:
    counts: dict[str, int] = {}
    for r in g.runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    errors = [r.error for r in g.runs if r.status == "failed" and r.error]
    err = (": " + one_line(errors[0])) if errors else ""
    if len(counts) == 1:
        st = next(iter(counts))
        return f"{st}{err}" if st == "failed" else st
    parts = [f"{n} {st}" for st, n in counts.items()]
    return ", ".join(parts) + err


def one_line(text: str, n: int = 100) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `n` characters with "…"."""
    line = " ".join(str(text).split())
    return line if len(line) <= n else line[: n - 1] + "…"


def table_rows(groups: list[ArmGroup], rkeys: list[str]) -> tuple[list[str], list[list[str]]]:
    """The side-by-side table: (header, one row per arm)."""
    objectives = [k for k in rkeys if k != "reward/total"]
    header = (
        ["arm", "seeds", "status", "final reward", "best reward", "mean reward 1st → 2nd half"]
        + [f"final {k}" for k in objectives]
        + [
            "accuracy",
            "signal",
            "eval greedy before → after",
            "time/step (s)",
            "peak mem (MB)",
            "group_size",
            "updates",
            "lr",
            "max_new_tokens",
            "warnings",
        ]
    )
    rows = []
    for g in groups:
        ok = g.ok_runs
        before, after = fmt_ms(eval_acc(r, "before") for r in ok), fmt_ms(eval_acc(r, "after") for r in ok)
        used = used_values(g.runs[0])
        rows.append(
            [
                g.name,
                ",".join(str(r.seed) for r in g.runs),
                _status(g),
                fmt_ms(_last(r, "reward/total") for r in ok),
                fmt_ms(_best(r, "reward/total") for r in ok),
                f"{fmt_ms(_half_mean(r, 'reward/total', 0) for r in ok)} → {fmt_ms(_half_mean(r, 'reward/total', 1) for r in ok)}",
            ]
            + [fmt_ms(_last(r, k) for r in ok) for k in objectives]
            + [
                fmt_ms(_last(r, "accuracy") for r in ok),
                fmt_ms(mean_over_steps(r, signal_key(r)) for r in ok),
                f"{before} → {after}",
                fmt_ms((_mean_of(r, "time/step") for r in ok), 2),
                fmt_ms((_peak(r) for r in ok), 0),
            ]
            + [used["group_size"], used["updates"], used["lr"], used["max_new_tokens"], arm_marks(g)]
        )
    return header, rows
