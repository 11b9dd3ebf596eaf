"""The report's learning curve (zoo.study.report.curve): held-out accuracy at step 0, at every eval.every steps
and after the last step, mean over seeds with a t interval, and paired differences against the baseline."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from zoo.study import report
from zoo.study.report import curve
from zoo.study.report.runs import discover, group_runs


def _run(root: Path, variant: str, seed: int, accs: list[float], status: str = "finished", mid: bool = True) -> None:
    """A run of 4 steps with accuracies [before, step 2, after] and 10 s per step."""
    d = root / f"{variant}-s{seed}"
    d.mkdir(parents=True)
    recs = [{"step": 0, "eval/greedy_acc": accs[0], "eval/phase": 0.0}]
    for s in range(1, 5):
        recs.append({"step": s, "reward/total": 0.1 * s, "time/step": 10.0, "time/elapsed": 10.0 * s})
        if s == 2 and mid:
            recs.append({"step": 2, "eval/greedy_acc": accs[1]})
    if status == "finished":
        recs.append({"step": 4, "eval/greedy_acc": accs[2], "eval/phase": 1.0})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary = {"status": status, "eval/before": {"eval/greedy_acc": accs[0]}, "config": {"variant": {"name": variant}}}
    if status == "finished":
        summary["eval/after"] = {"eval/greedy_acc": accs[2]}
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "config.yaml").write_text(
        yaml.safe_dump({"name": d.name, "variant": variant, "seed": seed, "budget": {"steps": 4}})
    )


@pytest.fixture
def study(tmp_path) -> Path:
    root = tmp_path / "runs" / "lc"
    # grpo: before 0.4, mid 0.45/0.5/0.55, after 0.5/0.6/0.7; dapo is grpo + 0.1, 0.1, 0.2 at step 4 per seed
    for s, (mid, after) in enumerate([(0.45, 0.5), (0.5, 0.6), (0.55, 0.7)]):
        _run(root, "grpo", s, [0.4, mid, after])
        _run(root, "dapo", s, [0.4, mid + 0.1, after + (0.2 if s == 2 else 0.1)])
    _run(root, "dapo", 3, [0.4, 0.9], status="failed")  # left out: no after-training point
    (root / "study.json").write_text(json.dumps({"name": "lc", "baseline": "grpo"}))
    return root


def test_accuracy_curve_has_before_mid_and_after_points(study):
    runs = {r.label: r for r in discover(study)}
    assert curve.accuracy_curve(runs["grpo-s1"]) == {0: 0.4, 2: 0.5, 4: 0.6}
    assert curve.wall_time(runs["grpo-s1"]) == {0: 0.0, 1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0}
    assert curve.accuracy_curve(runs["dapo-s3"]) == {0: 0.4, 2: 0.9}  # a failed run: no after point


def test_rows_are_means_over_finished_seeds_with_paired_differences(study):
    groups = group_runs(discover(study))
    header, rows = curve.curve_rows(groups, "grpo")
    by = {(r[0], r[1]): dict(zip(header, r)) for r in rows}
    # grpo at step 4: mean of 0.5, 0.6, 0.7 = 0.6; t interval 0.6 +- t(0.975, 2) * 0.1 / sqrt(3) = 0.6 +- 0.2484
    g4 = by[("grpo", "4")]
    assert g4["seeds"] == "3" and g4["accuracy"] == "0.600" and g4["wall s"] == "40"
    assert g4["95% CI (seeds)"] == "[0.352, 0.848]"
    # gain over step 0 (0.4) per seed: 0.1, 0.2, 0.3 -> +0.2 +- t(0.975, 2) * 0.1 / sqrt(3) = +0.2 +- 0.2484
    assert g4["gain"] == "+0.200" and g4["95% CI gain (seeds)"] == "[-0.048, +0.448]"
    assert by[("grpo", "0")]["gain"] == "-" and by[("grpo", "0")]["95% CI gain (seeds)"] == "-"
    # dapo: the failed seed 3 is left out; step 2: 0.55, 0.6, 0.65 -> 0.6, minus grpo 0.1 at every seed
    d2 = by[("dapo", "2")]
    assert d2["seeds"] == "3" and d2["accuracy"] == "0.600" and d2["− grpo"] == "+0.100"
    assert d2["verdict"] == "higher† (n < 5: indicative)"
    # step 4: differences 0.1, 0.1, 0.2 -> mean 0.1333; seeds needed (1.96+0.8416)^2 * 0.0577^2 / 0.1333^2 -> 2
    d4 = by[("dapo", "4")]
    assert d4["− grpo"] == "+0.133"
    sd = math.sqrt(((0.1 - 0.4 / 3) ** 2 * 2 + (0.2 - 0.4 / 3) ** 2) / 2)
    assert d4["seeds needed"] == str(max(2, math.ceil(7.8489 * sd * sd / (0.4 / 3) ** 2)))
    assert by[("dapo", "0")]["verdict"] == "same model" and by[("grpo", "2")]["verdict"] == "baseline"


def test_report_has_the_section_and_the_plot_only_with_mid_training_evals(study, tmp_path):
    md = report.write_report(study).read_text()
    assert "## Held-out accuracy during training" in md
    assert (study / "plots" / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    flat = tmp_path / "runs" / "flat"
    for s in range(2):
        _run(flat, "grpo", s, [0.4, 0.5, 0.6], mid=False)
    assert not curve.has_curve(group_runs(discover(flat)))
    assert "## Held-out accuracy during training" not in report.write_report(flat).read_text()
