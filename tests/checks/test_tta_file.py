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


@pytest.mark.parametrize(
    "tta, key, bound",
    [
        ({"policy": {"image_size": 100000}}, "tta.policy.image_size", "less than or equal to 224"),
        ({"policy": {"pretrain_size": 10001}}, "tta.policy.pretrain_size", "less than or equal to 10000"),
        ({"views": 257}, "tta.views", "less than or equal to 256"),
        ({"data": {"size": 10**9}}, "tta.data.size", "less than or equal to 10000"),
    ],
)
def test_huge_image_sizes_and_counts_are_refused_before_anything_is_drawn(tta, key, bound):
    assert errors(tta) == [f"f.yaml: key {key!r}: Input should be {bound}"]


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


@pytest.mark.parametrize("path", ["examples/tta_grpo.yaml", "experiments/grpo_tta.yaml"])
def test_zoo_run_on_a_tta_file_says_run_zoo_tta_in_one_line(path):
    """`zoo run` listed every key of the `tta:` file it did not know (tta, out, study, ...)."""
    f = str(ROOT / path)
    r = runner.invoke(app, ["run", f])
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 1 and "not allowed" not in r.output, r.output
    assert errors == [
        f"error: {f}: a `zoo tta` file (a top-level `tta:`), not a run file: run it with `zoo tta {f}` "
        "(docs/reference/grpo-tta.md)"
    ]
    r = runner.invoke(app, ["validate", f])
    assert r.exit_code == 0 and f"run it with `zoo tta {f}`, not `zoo run`" in r.output, r.output


def test_tta_keys_at_a_run_files_top_level_are_one_error_pointing_to_zoo_tta(tmp_path):
    f = tmp_path / "flat.yaml"
    f.write_text("name: flat\nmethod: variant\nvariant: grpo_tta\nadapt: norms\nviews: 16\nkeep: 0.25\n")
    for cmd in ("run", "validate"):
        r = runner.invoke(app, [cmd, str(f)])
        assert r.exit_code == 1 and "not allowed" not in r.output, r.output
        assert (
            f"{f}: keys method, adapt, views, keep are a `zoo tta` file's `tta:` keys, not a run file's: put them "
            f"under `tta:` and run `zoo tta {f}`" in " ".join(r.output.split())
        ), r.output


@pytest.mark.parametrize("variant", ["grpo_tta", "rlcf"])
def test_a_tta_variant_in_a_zoo_run_file_is_refused_before_any_model_loads(tmp_path, variant):
    from zoo.checks import before_load
    from zoo.study.run_file import load_run_config

    f = tmp_path / "run.yaml"
    f.write_text(f"variant: {variant}\nmodel: smollm2-135m-instruct-q4\ntask: {{name: reasoning_gym, size: 8}}\n")
    rep, _ = before_load(load_run_config(f))  # the checks `zoo run` runs before it loads a model
    assert rep.errors == [
        f"{f}: key 'variant': {variant!r} ({ROOT / 'registry' / variant}.yaml) is a `zoo tta` variant (trains: "
        "dual_encoder, test-time adaptation of a CLIP-style dual encoder), not one `zoo run` can train: put "
        f"`variant: {variant}` under a `zoo tta` file's `tta:` and run `zoo tta FILE` (examples/tta_grpo.yaml, "
        "docs/reference/grpo-tta.md)"
    ]
    r = runner.invoke(app, ["validate", str(f)])
    assert r.exit_code == 1 and "is a `zoo tta` variant" in r.output


def _study(tmp_path, tta: dict, arms: list) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "tta": tta, "study": {"seeds": [0, 1, 2, 3, 4], "arms": arms}}))
    return f


def test_two_tta_arms_of_one_name_are_one_line_naming_the_name(tmp_path):
    f = _study(tmp_path, {}, [{"name": "a"}, {"name": "b"}, {"name": "a", "candidates": "sample"}])
    for cmd in (["validate", str(f)], ["tta", str(f)], ["ablate", str(f), "--dry-run"]):
        r = runner.invoke(app, cmd)
        errors = [line for line in r.output.splitlines() if "error" in line]
        assert r.exit_code == 1 and len(errors) == 1 and "Traceback" not in r.output, (cmd, r.output)
        assert (
            f"{f}: key 'study.arms[2].name': arm 'a' is listed twice (study.arms[0] and study.arms[2]); arms need "
            "distinct names" in " ".join(r.output.split())
        ), r.output


def test_a_tpt_arm_is_not_held_to_the_variant_and_reward_checks(tmp_path):
    """TPT's loss is the entropy of the mean prediction (arXiv 2209.07511 eq. 3): no rewards, no KL. The
    file's `variant: grpo` (a KL) and one kept view (dispersion 0) matter to the variant arm only."""
    tta = {"variant": "grpo", "views": 4, "keep": 0.25}
    rep, f = check_tta_data(yaml.safe_load(_study(tmp_path, tta, [{"name": "t", "method": "tpt"}]).read_text()), "s")
    assert rep.ok and rep.warnings == [] and f is not None
    arms = [{"name": "t", "method": "tpt"}, {"name": "v"}, {"name": "w", "variant": "grpo_tta"}]
    rep, _ = check_tta_data(yaml.safe_load(_study(tmp_path, tta, arms).read_text()), "s")
    assert [e.split(": key")[0] for e in rep.errors] == ["s (arm v)"] and "'slots.kl'" in rep.errors[0]
    assert [w.split(": key")[0] for w in rep.warnings] == ["s (arm w)"] and "tta_dispersion" in rep.warnings[0]


def test_a_tpt_run_does_not_build_the_variant_or_the_rewards():
    from zoo.config.tta import TTASpec
    from zoo.run.tta import variant_context

    assert variant_context(TTASpec(method="tpt", variant="grpo", rewards=["no_such_reward"])) == {"method": "tpt"}
    ctx = variant_context(TTASpec())
    assert ctx["group_size"] == 3 and ctx["epochs"] == 1 and len(ctx["fns"]) == 2
