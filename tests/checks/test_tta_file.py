"""`zoo validate` and `zoo tta` on `zoo tta` files (zoo.checks.tta, zoo.cli.tta): errors name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from zoo.checks.tta import check_tta_data
from zoo.cli import app
from zoo.cli import main as _main  # noqa: F401  (registers the commands)

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def errors(tta: dict) -> list[str]:
    rep, _ = check_tta_data({"tta": tta}, "f.yaml")
    return rep.errors


@pytest.mark.parametrize("example", ["tta_grpo.yaml", "tta_rlcf.yaml"])
def test_the_shipped_examples_validate(example):
    r = runner.invoke(app, ["validate", str(ROOT / "examples" / example)])
    assert r.exit_code == 0, r.output
    # grpo_tta's ppo clip is inactive at ratio 1 (said in a note); rlcf has no clip to be inactive
    assert ("the ratio is 1" in r.output) == (example == "tta_grpo.yaml")


def test_unknown_key_names_it_and_lists_the_allowed_keys():
    (e,) = errors({"stepz": 3})
    assert "f.yaml: key 'tta.stepz'" in e and "steps" in e


def test_bad_values_name_the_key():
    assert any("'tta.adapt'" in e and "visual" in e and "norms" in e for e in errors({"adapt": "text"}))
    assert any("'tta.candidates'" in e for e in errors({"candidates": "beam"}))
    assert any("'tta.data.severity'" in e for e in errors({"data": {"severity": 9}}))


def test_a_variant_with_kl_or_critic_is_refused_naming_the_slot():
    (e,) = errors({"variant": "grpo"})
    assert "key 'tta.variant'" in e and "'slots.kl': must be none" in e


def test_an_unknown_reward_names_the_key():
    (e,) = errors({"rewards": ["tta_alignmnt"]})
    assert "key 'tta.rewards'" in e and "tta_alignment" in e


def test_a_group_larger_than_the_classes_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump({"name": "big", "base": "grpo_tta", "group_size": 12}))
    (e,) = errors({"variant": str(big)})
    assert "group_size 12 exceeds the 9 classes" in e


def test_dispersion_with_one_kept_view_and_a_labelled_reward_warn():
    rep, _ = check_tta_data({"tta": {"views": 4, "keep": 0.25, "rewards": ["tta_dispersion", "correctness"]}}, "f")
    assert rep.ok
    assert any("tta_dispersion is 0 for every class with one kept view" in w for w in rep.warnings)
    assert any("'correctness' is not one of zoo's label-free rewards" in w for w in rep.warnings)


def test_set_is_refused_for_a_tta_file():
    r = runner.invoke(app, ["validate", str(ROOT / "examples/tta_grpo.yaml"), "--set", "tta.steps=1"])
    assert r.exit_code == 1 and "takes no --set" in r.output


def test_zoo_tta_runs_a_tiny_file_and_writes_its_result(tmp_path):
    f = tmp_path / "t.yaml"
    tta = {"policy": {"pretrain_steps": 0}, "steps": 2, "views": 4, "keep": 0.5, "data": {"size": 2}}
    f.write_text(yaml.safe_dump({"name": "tiny", "tta": tta}))
    r = runner.invoke(app, ["tta", str(f), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "tiny: 2 images, zero-shot accuracy" in r.output
    rec = json.loads((tmp_path / "out" / "result.json").read_text())
    assert rec["images"] == 2 and len(rec["records"]) == 2 and rec["config"]["tta"]["steps"] == 2


def test_zoo_tta_refuses_a_bad_file_naming_the_key(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump({"tta": {"adapt": "all"}}))
    r = runner.invoke(app, ["tta", str(f)])
    assert r.exit_code == 1 and "'tta.adapt'" in r.output


def test_zoo_list_shows_the_policy_source_the_rewards_and_the_variants():
    r = runner.invoke(app, ["list", "--json"])
    out = json.loads(r.output)
    assert out["tta"]["policy_sources"] == ["dual_encoder"] and out["tta"]["images"] == ["tta_shapes"]
    assert "colour" in out["tta"]["shifts"] and out["tta"]["methods"] == ["variant", "tpt"]
    assert {"tta_alignment", "tta_dispersion"} <= set(out["reward"]) and {"grpo_tta", "rlcf"} <= set(out["variants"])
    r = runner.invoke(app, ["list"], terminal_width=400)
    row = next(ln for ln in r.output.splitlines() if "zoo tta" in ln)
    assert "policy dual_encoder" in row and "images tta_shapes" in row and "grpo_tta" in r.output
