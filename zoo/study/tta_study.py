"""A study of `zoo tta` (issue 32 §3, experiments/grpo_tta.yaml): arms x conditions x seeds, with intervals.

    f = load_tta_file("experiments/grpo_tta.yaml")          # a `zoo tta` file with a `study:` mapping
    res = run_tta_study(f, "experiments/grpo_tta.yaml")     # every arm on every (shift, severity), each seed
    text = tta_study_report(res)                            # markdown: zero-shot table, accuracy, differences

Seed s gives one pre-trained model (`policy.seed` s, from zoo's cache when built before), one set of
test images per condition (`data.seed` s) and one stream of views (`seed` s), shared by every arm, so
the arms pair by seed. "zero_shot" is the pre-trained model's prediction on the original image before
any update (the same for every arm that shares the policy: checked). Statistics are zoo's
(`zoo.study.report.intervals`, Agarwal et al. 2021, arXiv 2108.13264): per cell, the IQM over seeds
with a 95% percentile-bootstrap interval, and paired differences (mean of the per-seed differences,
its bootstrap interval, the verdict "higher" / "lower" / "not distinguishable at this budget").
"""

from __future__ import annotations

import copy
import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from zoo.config.tta import TTAFile, TTASpec, study_arms
from zoo.models.dual_cache import pretrained_dual_encoder
from zoo.models.dual_encoder import DualEncoder
from zoo.run.tta import run_tta
from zoo.study.report.intervals import Difference, difference, estimate
from zoo.tasks.shapes import shape_rows

ZERO_SHOT = "zero_shot"
Cond = tuple[str, int]  # (shift, severity); ("none", 0) = clean


def cond_label(c: Cond) -> str:
    return "clean" if c[0] == "none" else f"{c[0]}-{c[1]}"


@dataclass
class TTAStudyResult:
    """accuracy[arm][condition label][seed]; zero_shot_table[condition label][seed] (no adaptation)."""

    name: str
    arms: list[str]
    conditions: list[str]
    seeds: list[int]
    size: int
    compare: list[tuple[str, str]] = field(default_factory=list)
    accuracy: dict[str, dict[str, dict[int, float]]] = field(default_factory=dict)
    zero_shot_table: dict[str, dict[int, float]] = field(default_factory=dict)
    seconds: float = 0.0
    pretrain_seconds: float = 0.0
    machine: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def machine_info() -> dict[str, Any]:
    """The CPU model (`lscpu`'s "Model name", else platform), cores, torch threads and the load average."""
    model = platform.processor() or platform.machine()
    if shutil.which("lscpu"):
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), model)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu": model, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "load": load}


def study_conditions(f: TTAFile) -> list[Cond]:
    st = f.study
    assert st is not None
    return ([("none", 0)] if st.clean else []) + [(s, v) for s in st.shifts for v in st.severities]


def _for_seed(spec: TTASpec, seed: int, c: Cond, size: int) -> TTASpec:
    d = spec.model_dump()
    d["policy"]["seed"], d["seed"] = seed, seed
    d["data"].update(seed=seed, shift=c[0], severity=c[1], size=size)
    return TTASpec.model_validate(d)


def zero_shot_accuracy(enc: DualEncoder, c: Cond, seed: int, size: int) -> float:
    """Accuracy of `enc` on the `size` original images of condition `c` (seed `seed`), no adaptation."""
    rows = shape_rows(size, seed, shift=c[0], severity=c[1], image_size=enc.processor.crop_size["height"])
    with torch.no_grad():
        pred = enc.logits(enc.pixels([r["images"][0] for r in rows])).argmax(-1).tolist()
    return sum(enc.classes[p] == r["answer"] for p, r in zip(pred, rows)) / len(rows)


def run_tta_study(f: TTAFile, where: str, log: Callable[[str], None] = print) -> TTAStudyResult:
    """Every arm of `f.study` on every condition and seed (module doc); `log` gets one line per cell."""
    st, start = f.study, time.perf_counter()
    assert st is not None
    arms, conds = study_arms(f, where), study_conditions(f)
    res = TTAStudyResult(f.name, [ZERO_SHOT] + [n for n, _ in arms], [cond_label(c) for c in conds],
                         list(st.seeds), st.size, list(st.compare), machine={"start": machine_info()})  # fmt: skip
    for seed in st.seeds:
        models: dict[str, DualEncoder] = {}
        for c in conds:
            for name, spec in arms:
                cfg = _for_seed(spec, seed, c, st.size)
                key = json.dumps(cfg.policy.model_dump(), sort_keys=True)
                if key not in models:
                    t = time.perf_counter()
                    models[key] = pretrained_dual_encoder(cfg.policy)
                    res.pretrain_seconds += time.perf_counter() - t
                r = run_tta(cfg, enc=copy.deepcopy(models[key]))
                _record(res, name, cond_label(c), seed, r.accuracy, r.zero_shot_accuracy)
            log(f"seed {seed} {cond_label(c)}: " + _cell_line(res, cond_label(c), seed)
                + f" ({time.perf_counter() - start:.0f} s)")  # fmt: skip
        base = models[json.dumps(_for_seed(arms[0][1], seed, conds[0], 1).policy.model_dump(), sort_keys=True)]
        for c in [("none", 0)] + [(s, v) for s in st.shifts for v in st.zero_shot_severities]:
            res.zero_shot_table.setdefault(cond_label(c), {})[seed] = zero_shot_accuracy(base, c, seed, st.size)
    res.seconds = time.perf_counter() - start
    res.machine["end"] = machine_info()
    return res


def _record(res: TTAStudyResult, arm: str, cond: str, seed: int, acc: float, zero_shot: float) -> None:
    cell = res.accuracy.setdefault(ZERO_SHOT, {}).setdefault(cond, {})
    if seed in cell and abs(cell[seed] - zero_shot) > 1e-9:
        raise RuntimeError(f"{arm}: zero-shot accuracy {zero_shot} differs from another arm's {cell[seed]} "
                           f"on {cond}, seed {seed}: do the arms share the policy?")  # fmt: skip
    cell[seed] = zero_shot
    res.accuracy.setdefault(arm, {}).setdefault(cond, {})[seed] = acc


def _cell_line(res: TTAStudyResult, cond: str, seed: int) -> str:
    return ", ".join(f"{a} {res.accuracy[a][cond][seed]:.3f}" for a in res.arms if cond in res.accuracy.get(a, {}))


def pooled(res: TTAStudyResult, arm: str, shifted_only: bool = True) -> dict[int, float]:
    """{seed: mean accuracy of `arm` over the conditions} (the shifted ones only, by default)."""
    conds = [c for c in res.conditions if not (shifted_only and c == "clean")]
    return {s: sum(res.accuracy[arm][c][s] for c in conds) / len(conds) for s in res.seeds}


def _est(values: dict[int, float]) -> str:
    e = estimate(list(values.values()))
    if e.iqm is None:
        return "-"
    return f"{e.iqm:.3f}" if e.low is None else f"{e.iqm:.3f} [{e.low:.3f}, {e.high:.3f}]"


def _diff(d: Difference) -> str:
    if d.delta is None:
        return "-"
    if d.low is None:
        return f"{d.delta:+.3f}"
    mark = {"higher": " ↑", "lower": " ↓"}.get(d.verdict, "" if d.verdict.startswith("not") else " ?")
    return f"{d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}]{mark}"


def _rows(res: TTAStudyResult) -> list[tuple[str, Callable[[str], dict[int, float]]]]:
    """(row label, arm -> {seed: accuracy}) for each condition, then the mean over the shifted ones."""
    out: list[tuple[str, Callable[[str], dict[int, float]]]] = [
        (c, lambda a, c=c: res.accuracy[a][c]) for c in res.conditions
    ]
    if any(c != "clean" for c in res.conditions):
        out.append(("**all shifted (mean)**", lambda a: pooled(res, a)))
    return out


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _zero_shot_section(res: TTAStudyResult) -> list[str]:
    sevs = sorted({int(c.rsplit("-", 1)[1]) for c in res.zero_shot_table if c != "clean"})
    shifts = list(dict.fromkeys(c.rsplit("-", 1)[0] for c in res.zero_shot_table if c != "clean"))
    rows = [["clean (severity 0)", _est(res.zero_shot_table["clean"])] + [""] * len(sevs)]
    rows += [[s, ""] + [_est(res.zero_shot_table[f"{s}-{v}"]) for v in sevs] for s in shifts]
    return _table(["shift", "0"] + [str(v) for v in sevs], rows)


def tta_study_report(res: TTAStudyResult, command: str = "") -> str:
    """The study's markdown report: setting, zero-shot table, accuracy, paired differences (module doc)."""
    m0, m1 = res.machine.get("start", {}), res.machine.get("end", {})
    arms = [a for a in res.arms if a != ZERO_SHOT]
    out = [f"# {res.name}: zero-shot, TPT, RLCF and GRPO-TTA under shifts", ""]
    if command:
        out += ["```bash", command, "```", ""]
    out += [
        f"{len(res.seeds)} seeds ({', '.join(map(str, res.seeds))}), {res.size} images per condition, "
        f"{len(res.conditions)} conditions x {len(arms)} adapted arms; {res.seconds:.0f} s in all "
        f"({res.pretrain_seconds:.0f} s of it pre-training or loading the cached models). "
        f"Machine: {m0.get('cpu')}, {m0.get('cores')} cores, {m0.get('torch_threads')} torch thread(s); "
        f"load average (1, 5, 15 min) {_load(m0)} at the start, {_load(m1)} at the end.",
        "",
        "Cells: IQM over seeds [95% percentile-bootstrap interval] (zoo.study.report.intervals). "
        "Differences: the mean of the per-seed paired differences [its 95% bootstrap interval]; "
        "↑ / ↓ = the interval excludes 0, unmarked = not distinguishable at this budget. "
        f"One image is 1/{res.size} = {1 / res.size:.3f} of a cell's accuracy.",
        "",
        "## Zero-shot accuracy per shift and severity (no adaptation)",
        "",
        *_zero_shot_section(res),
        "",
        "## Accuracy",
        "",
    ]
    rows = _rows(res)
    out += _table(["condition"] + res.arms, [[lbl] + [_est(fn(a)) for a in res.arms] for lbl, fn in rows])
    out += ["", "## Paired differences against zero-shot (arm - zero_shot)", ""]
    diffs = [[lbl] + [_diff(difference(fn(a), fn(ZERO_SHOT), paired=True)) for a in arms] for lbl, fn in rows]
    out += _table(["condition"] + arms, diffs)
    for a, b in res.compare:
        out += ["", f"## {a} - {b} (paired)", ""]
        cells = []
        for lbl, fn in rows:
            d = difference(fn(a), fn(b), paired=True)
            cells.append([lbl, _diff(d), d.verdict, _num(d.p_improve), _num(d.seeds_needed)])
        out += _table(["condition", "difference [95% CI]", "verdict", "P(improvement)", "seeds for 80% power"], cells)
    return "\n".join(out) + "\n"


def _load(m: dict[str, Any]) -> str:
    load = m.get("load")
    return "n/a" if not load else ", ".join(f"{x:.2f}" for x in load)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}" if x < 1e6 else "inf"
