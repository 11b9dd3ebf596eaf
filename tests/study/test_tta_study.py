"""The `zoo tta` study (zoo.study.tta_study): arms x conditions x seeds, zoo's intervals, the report."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app
from zoo.config.tta import parse_tta
from zoo.study.tta_study import ZERO_SHOT, TTAStudyResult, pooled, run_tta_study, tta_study_report

TINY = {
    "name": "tiny_study",
    "tta": {"policy": {"pretrain_steps": 3, "pretrain_size": 18}, "steps": 1, "views": 4, "keep": 0.5},
    "study": {
        "seeds": [0, 1],
        "size": 3,
        "shifts": ["colour"],
        "severities": [4],
        "zero_shot_severities": [4, 5],
        "arms": [{"name": "grpo_tta"}, {"name": "tpt", "method": "tpt"}],
        "compare": [["grpo_tta", "tpt"]],
    },
}


@pytest.fixture(autouse=True)
def _zoo_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "zoo-cache"))


def test_a_tiny_study_runs_every_arm_condition_and_seed():
    res = run_tta_study(parse_tta(TINY, "t.yaml"), "t.yaml", log=lambda _: None)
    assert res.arms == [ZERO_SHOT, "grpo_tta", "tpt"] and res.conditions == ["clean", "colour-4"]
    for arm in res.arms:
        assert {c: sorted(v) for c, v in res.accuracy[arm].items()} == {"clean": [0, 1], "colour-4": [0, 1]}
        assert all(v in (0, 1 / 3, 2 / 3, 1) for c in res.accuracy[arm].values() for v in c.values())
    # the zero-shot table (a batch forward of the original images) equals the runs' zero-shot (view 0 of each)
    assert res.zero_shot_table["colour-4"] == pytest.approx(res.accuracy[ZERO_SHOT]["colour-4"])
    assert sorted(res.zero_shot_table) == ["clean", "colour-4", "colour-5"]
    text = tta_study_report(res)
    assert "## grpo_tta - tpt (paired)" in text and "| colour-4 |" in text and "all shifted (mean)" in text


def test_pooled_and_the_report_read_the_intervals_by_hand():
    seeds = [0, 1, 2, 3, 4]
    res = TTAStudyResult("h", [ZERO_SHOT, "a"], ["clean", "noise-2", "blur-2"], seeds, 18, [("a", ZERO_SHOT)])
    res.accuracy = {
        ZERO_SHOT: {c: {s: 0.5 for s in seeds} for c in res.conditions},
        "a": {
            "clean": {s: 0.5 for s in seeds},
            "noise-2": {s: 0.5 + 1 / 18 for s in seeds},
            "blur-2": {s: 0.5 + s / 18 for s in seeds},
        },  # fmt: skip
    }
    res.zero_shot_table = {"clean": {s: 0.5 for s in seeds}, "noise-2": {s: 0.5 for s in seeds}}
    # shifted mean of seed s: (0.5 + 1/18 + 0.5 + s/18) / 2 = 0.5 + (1 + s) / 36
    assert pooled(res, "a") == pytest.approx({s: 0.5 + (1 + s) / 36 for s in seeds})
    text = tta_study_report(res)
    assert "| noise-2 | +0.056 [+0.056, +0.056] ↑ | higher |" in text  # the same +1 image on every seed
    assert "| clean | +0.000 [+0.000, +0.000] | not distinguishable at this budget |" in text


def test_bad_study_keys_name_the_arm_and_the_key(tmp_path):
    bad = json.loads(json.dumps(TINY))
    bad["study"]["arms"][1]["adapt"] = "all"
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(bad))
    r = CliRunner().invoke(app, ["validate", str(f)])
    assert r.exit_code == 1 and "study.arms[1] (tpt)" in r.output and "adapt" in r.output
    bad["study"]["arms"][1] = {"name": "tpt"}
    bad["study"]["compare"] = [["grpo_tta", "rlcf"]]
    f.write_text(yaml.safe_dump(bad))
    r = CliRunner().invoke(app, ["validate", str(f)])
    assert r.exit_code == 1 and "'study.compare'" in r.output and "rlcf" in r.output


def test_zoo_tta_runs_a_study_file_and_writes_its_report(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(TINY))
    r = CliRunner().invoke(app, ["tta", str(f), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "seed 1 colour-4:" in r.output
    assert (tmp_path / "out" / "report.md").read_text().startswith("# tiny_study")
    assert json.loads((tmp_path / "out" / "result.json").read_text())["seeds"] == [0, 1]


def test_the_shipped_study_validates_with_five_arms_and_five_seeds():
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    r = CliRunner().invoke(app, ["validate", str(root / "experiments/grpo_tta.yaml")])
    assert r.exit_code == 0, r.output
    f = parse_tta(yaml.safe_load((root / "experiments/grpo_tta.yaml").read_text()), "grpo_tta.yaml")
    assert len(f.study.seeds) >= 5 and [a["name"] for a in f.study.arms][:2] == ["tpt", "rlcf"]


def test_zoo_ablate_dry_run_on_a_tta_study_prints_every_arm_and_seed(tmp_path):
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    r = CliRunner().invoke(app, ["ablate", str(root / "experiments/grpo_tta.yaml"), "--dry-run"])
    assert r.exit_code == 0, r.output
    f = parse_tta(yaml.safe_load((root / "experiments/grpo_tta.yaml").read_text()), "grpo_tta.yaml")
    for arm in ["zero_shot", "tpt", "rlcf", "grpo_tta"]:
        assert all(f"{arm}-s{s}" in r.output for s in f.study.seeds), arm
    assert "dry run: nothing written" in r.output
    one = tmp_path / "one.yaml"  # a file without `study:` is one run, not a study
    one.write_text((root / "examples/tta_grpo.yaml").read_text())
    r = CliRunner().invoke(app, ["ablate", str(one), "--dry-run"])
    assert r.exit_code == 1 and "without a `study:` mapping" in r.output and "zoo tta " in r.output


def test_a_tta_study_refuses_ablate_options_and_a_study_without_conditions(tmp_path):
    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    study = str(root / "experiments/grpo_tta.yaml")
    for extra in (["--set", "tta.lr=1"], ["--shard", "0/2"], ["--fresh", "tpt"], ["--write-configs"]):
        r = CliRunner().invoke(app, ["ablate", study, "--dry-run", *extra])
        assert r.exit_code == 1 and f"takes none of {extra[0]}" in r.output, (extra, r.output)
    data = yaml.safe_load((root / "experiments/grpo_tta.yaml").read_text())
    data["study"].update(clean=False, shifts=[])
    (tmp_path / "none.yaml").write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["ablate", str(tmp_path / "none.yaml"), "--dry-run"])
    assert r.exit_code == 1 and "no condition to run" in r.output
