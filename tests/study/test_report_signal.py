"""The report's signal per group: per arm the signal fraction per step and its mean beside accuracy
(report.md's "Signal per group" and the side-by-side table's `signal` column), and the arms whose runs
got a guard warning (zoo.core.watch) marked, with the legend."""

import io
import json

from rich.console import Console
from test_report import RUNS, _row, _write_run

from zoo.study import report
from zoo.study.report.group_signal import MAX_SHOWN, per_step
from zoo.study.report.runs import RunData

SIGNAL = {  # label -> (groups/signal_frac, groups/correct_signal_frac) at steps 0..3
    "grpo-s0": ([1.0, 1.0, 0.5, 1.0], [0.5, 0.0, 0.0, 0.0]),
    "grpo-s1": ([1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.0, 0.5]),
    "dapo-s0": ([0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]),
    "dapo-s1": ([0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]),
}
WARNED = {"grpo-s0": {"guards/low_signal_step": 3.0}, "dapo-s1": {"guards/entropy_rise_step": 2.0}}


def _study(tmp_path):
    root = tmp_path / "runs" / "demo"
    for label, (sig, correct) in SIGNAL.items():
        d = root / label
        _write_run(d, RUNS[label], label.split("-")[0], int(label[-1]))
        recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        for r in recs:
            if "reward/total" in r:
                r.update({"groups/signal_frac": sig[r["step"]], "groups/correct_signal_frac": correct[r["step"]]})
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        summary = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps({**summary, **WARNED.get(label, {})}))
    return root


def test_the_report_shows_the_signal_per_step_and_marks_the_warned_arms(tmp_path):
    root = _study(tmp_path)
    md = report.write_report(root, console=Console(file=io.StringIO(), width=250)).read_text()
    grpo = dict(zip(_row(md, "arm"), _row(md, "grpo")))
    # correct signal over steps: s0 0.125, s1 0.375 -> 0.25 ± 0.177
    assert grpo["signal"] == "0.250 ± 0.177"
    assert grpo["warnings"] == "low signal (step 3; 1 of 2 seeds)"
    section = md[md.index("## Signal per group") :]
    assert "more than half of the groups carried no correctness signal for 3 consecutive steps" in section
    header = _row(section, "arm")
    assert header == [
        "arm",
        "reward signal (mean)",
        "correct signal (mean)",
        "signal per step",
        "accuracy (mean)",
        "accuracy per step",
        "warnings",
    ]
    grpo, dapo = (dict(zip(header, _row(section, a))) for a in ("grpo", "dapo"))
    assert grpo["reward signal (mean)"] == "0.938 ± 0.088" and grpo["correct signal (mean)"] == "0.250 ± 0.177"
    assert grpo["signal per step"] == "0.50 0.25 0.00 0.25"  # the mean over the two seeds at each step
    assert len(grpo["accuracy per step"].split()) == 4 and grpo["accuracy (mean)"] == "0.375 ± 0.088"
    assert dapo["warnings"] == "diverged: entropy (step 2; 1 of 2 seeds)"
    arms = {a["arm"]: a for a in json.loads((root / "report.json").read_text())["arms"]}
    assert arms["grpo"]["signal_mean"] == [0.125, 0.375] and arms["grpo"]["warnings"][0] == {"low signal": 3}


def test_a_long_run_shows_its_signal_in_windows(tmp_path):
    run = RunData("a-s0", tmp_path, [{"step": s, "groups/signal_frac": float(s % 2)} for s in range(40)], {}, {})
    assert per_step([run]) == " ".join(["0.50"] * MAX_SHOWN)  # 40 steps in 20 windows of 2
    assert per_step([RunData("b-s0", tmp_path, [], {}, {})]) == "-"
