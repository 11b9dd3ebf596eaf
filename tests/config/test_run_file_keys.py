"""A run file's errors lead with the run file and the key the user wrote (`run.yaml: set.kl.beta = -1:
must be >= 0`), the registry file the value was applied to after; and one rule for run files that say
nothing about what they train (`{}`, only `name:`). No model is loaded."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app
from zoo.config.variant import VariantError, builtin_dir
from zoo.run.trainer import validate_run
from zoo.study.run_file import load_run_config

runner = CliRunner()
BASE = {"name": "r", "variant": "grpo", "model": "smollm2-135m-instruct-q4", "task": {"name": "bandit"}}


def _file(tmp_path, **data):
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({**BASE, **data}, sort_keys=False))
    return f


def _run_error(f) -> str:
    """What `zoo run` reports before any model loads (validate_run on the file's config)."""
    with pytest.raises(VariantError) as e:
        validate_run(load_run_config(f))
    return str(e.value)


def _validate_errors(f) -> list[str]:
    r = runner.invoke(app, ["validate", str(f), "--json"])
    assert r.exit_code == 1, r.output
    return json.loads(r.stdout)[0]["errors"]


@pytest.mark.parametrize(
    "data, lead, variant_key",
    [
        # the example: a schema bound of the variant (KLSpec.beta >= 0)
        ({"set": {"kl.beta": -1}}, "set.kl.beta = -1: must be >= 0", "grpo.yaml, key 'slots.kl.beta'"),
        # a component's own check, reached through a dotted parameter
        (
            {"set": {"clip.eps": -1}},
            "set.clip.eps = -1: clip 'ppo': eps must be a finite number > 0, got -1",
            "grpo.yaml, key 'slots.clip'",
        ),
        # a list slot's item, by name
        (
            {"variant": "dapo", "set": {"correction.tis.C": 0.5}},
            "set.correction.tis.C = 0.5: correction 'tis': C must be a finite number >= 1",
            "dapo.yaml, key 'slots.correction'",
        ),
        # a list slot given whole
        (
            {"set": {"correction": [{"name": "tis", "cap": 3}]}},
            "set.correction = [{name: tis, cap: 3}]: correction 'tis': unknown parameter 'cap'",
            "grpo.yaml, key 'slots.correction'",
        ),
        # the budget replaces the variant's group size; the variant's check names only `group_size`
        (
            {"budget": {"group_size": 1}},
            "budget.group_size = 1: group_size 1 < 2 but group_mean, group_std need groups",
            "grpo.yaml)",
        ),
    ],
)
def test_a_variant_value_set_in_a_run_file_is_reported_under_the_users_key(tmp_path, data, lead, variant_key):
    f = _file(tmp_path, **data)
    msg = _run_error(f)
    assert msg.startswith(f"{f}: {lead}"), msg
    assert msg.endswith(variant_key + ")") or f"(applied to {builtin_dir()}/{variant_key}" in msg, msg
    assert msg.index(str(f)) < msg.index(str(builtin_dir()))  # the user's file first, the registry file after
    errs = _validate_errors(f)  # zoo validate says the same
    assert any(e.endswith(msg.splitlines()[0]) and e.startswith("arm r: ") for e in errs), errs


def test_an_unknown_set_key_names_the_run_file_and_the_close_match(tmp_path):
    f = _file(tmp_path, set={"clpi": "ppo"})
    msg = _run_error(f)
    assert msg.startswith(
        f"{f}: set.clpi = ppo: key 'clpi' is neither a slot nor a variant field (did you mean 'clip'?)"
    )


def test_a_set_value_from_the_command_line_is_named_too(tmp_path):
    f = _file(tmp_path)
    with pytest.raises(VariantError, match=rf"^{f}: set.kl.beta = -2: must be >= 0 \(applied to "):
        validate_run(load_run_config(f, {"set.kl.beta": -2}))


def test_a_study_arm_keeps_its_own_origin(tmp_path):
    # a study's arms name the arm and the ablation (zoo.study.validate), not a run file
    f = tmp_path / "study.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                **{k: v for k, v in BASE.items() if k != "variant"},
                "variants": ["grpo"],
                "ablations": {"neg": {"variant": "grpo", "set": {"kl.beta": -1}}},
            }
        )
    )
    errs = _validate_errors(f)
    assert any(e.startswith("arm neg: ablations.neg.set: kl.beta=-1: ") for e in errs), errs


def test_a_config_built_in_code_keeps_the_registry_message():
    from zoo.config.run import RunConfig, effective_variant

    with pytest.raises(VariantError, match=r"grpo.yaml: key 'slots.kl.beta': Input should be greater than or equal"):
        effective_variant(RunConfig(set={"kl.beta": -1}))


@pytest.mark.parametrize(
    "text, why",
    [
        ("{}\n", "the file has no keys"),
        ("", "the file is empty"),
        ("name: only-a-name\n", "the file sets only `name`, so it would train every default"),
        (
            "name: x\nbudget: {steps: 2}\nseed: 3\n",
            "the file sets only `name`, `budget`, `seed`, so it would train every",
        ),
    ],
)
def test_a_run_file_that_says_nothing_about_what_it_trains_is_refused_one_way(tmp_path, text, why):
    f = tmp_path / "run.yaml"
    f.write_text(text)
    rule = "a run file needs at least `variant`, `model` or `task` to say what it trains"
    r = runner.invoke(app, ["run", str(f)])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and f"{f}: {why}" in out and rule in out
    errs = _validate_errors(f)
    assert len(errs) == 1 and errs[0].startswith(f"{f}: {why}") and rule in errs[0]


@pytest.mark.parametrize(
    "data", [{"model": "smollm2-135m-instruct-q4"}, {"variant": "ppo"}, {"name": "t", "task": {"name": "bandit"}}]
)
def test_one_of_variant_model_task_is_enough(tmp_path, data):
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(data))
    assert load_run_config(f).variant == data.get("variant", "grpo")


def test_a_misspelt_key_still_gets_its_did_you_mean(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("name: t\nvarient: grpo\n")
    errs = _validate_errors(f)
    assert any("did you mean 'variant'" in e for e in errs), errs


def test_an_unknown_variant_names_the_run_file_and_its_key(tmp_path):
    """`variant: grpoo` in a run file: `zoo run` and `zoo validate` name the file and `variant`, and
    keep the close names and the known ones; an unknown `base:` of a variant file stays that file's."""
    f = _file(tmp_path, variant="grpoo")
    want = f"{f}: key 'variant': variant 'grpoo' not found; did you mean 'grpo'"
    msg = _run_error(f)
    assert msg.startswith(want) and "known: cispo, clip_cov, dapo" in msg
    assert [e.split("; did you")[0] for e in _validate_errors(f)] == [f"arm r: {want.split('; did you')[0]}"]
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: grpoo\n")
    msg = _run_error(_file(tmp_path, variant=str(mine)))
    assert "variant 'grpoo' not found" in msg and "key 'variant'" not in msg
