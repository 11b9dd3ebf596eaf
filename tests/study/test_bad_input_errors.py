"""A study's bad input is refused naming the file, the key and what is allowed, by `zoo validate` and
`zoo ablate` / `zoo run` alike: an unknown variant name (`variants[0]`, `ablations.NAME.variant`,
`variant`). No model is loaded (the `arms:a,b` bandit policy is only named)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from zoo.cli import app
from zoo.config.run import async_opts
from zoo.config.variant import VariantError
from zoo.study.experiment import expand_arms, load_study
from zoo.study.run_file import load_run_config

runner = CliRunner()
# the tester's tiny study: the bandit policy, one-token completions, no tracking
HEAD = (
    'model: "arms:a,b"\ntask: {name: bandit, size: 64}\n'
    "rewards: [{name: arm_bernoulli, p: {a: 0.9, b: 0.1}}]\n"
    "budget: {steps: 2, prompts_per_step: 2, group_size: 4, max_new_tokens: 1}\ntracking: {wandb: false}\n"
)


def _study(tmp_path, body: str):
    p = tmp_path / "s.yaml"
    p.write_text(HEAD + body + f"output_dir: {tmp_path / 'runs'}\n")
    return p


def _validate_errors(path, *extra: str) -> list[str]:
    r = runner.invoke(app, ["validate", str(path), "--json", *extra])
    assert r.exit_code == 1, r.output
    return json.loads(r.stdout)[0]["errors"]


@pytest.mark.parametrize(
    "body, key, arm",
    [
        ("variants: [grpo, grpoo]\n", "variants[1]", "grpoo"),
        ("ablations: {x: {variant: grpoo}}\n", "ablations.x.variant", "x"),
        ("variant: grpoo\nseeds: [0]\n", "variant", "grpoo"),  # a study whose one arm is its top-level variant
    ],
)
def test_an_unknown_variant_names_the_file_the_key_and_the_known_names(tmp_path, body, key, arm):
    p = _study(tmp_path, body)
    want = f"{p}: key '{key}': variant 'grpoo' not found; did you mean 'grpo'"
    errors = _validate_errors(p)
    assert len(errors) == 1 and errors[0].startswith(f"arm {arm}: {want}"), errors
    assert "known: cispo, clip_cov, dapo" in errors[0] and ", grpo, " in errors[0]
    r = runner.invoke(app, ["ablate", str(p), "--dry-run"])  # zoo ablate refuses it alike
    assert r.exit_code == 1 and f"arm {arm}: {want}" in " ".join(r.output.split())
    if key != "variants[1]":  # a study of one arm also runs with `zoo run`
        with pytest.raises(VariantError) as e:
            load_run_config(p)
        assert str(e.value) == errors[0].removeprefix(f"arm {arm}: ")


def test_every_unknown_variant_of_a_study_is_named_with_the_other_arms_problems(tmp_path):
    """Each arm is checked: two unknown variants and another arm's misspelt override, three errors."""
    body = "variants: [grpo, dapoo]\nablations: {x: {variant: grpoo}, y: {variant: grpo, set: {clp: ppo}}}\n"
    p = _study(tmp_path, body)
    errors = [e.split(" not found")[0] for e in _validate_errors(p)]
    assert errors[:2] == [
        f"arm dapoo: {p}: key 'variants[1]': variant 'dapoo'",
        f"arm x: {p}: key 'ablations.x.variant': variant 'grpoo'",
    ]
    assert len(errors) == 3 and errors[2].startswith("arm y: ablations.y.set: key 'clp'")
    flagged = _validate_errors(_study(tmp_path, "variants: [grpo]\n"), "--set", "variants=[grpoo]")
    assert flagged[0].startswith("arm grpoo: --set variants=[grpoo]: key 'variants[0]': variant 'grpoo' not found")


def test_a_missing_variant_file_names_the_key(tmp_path):
    p = _study(tmp_path, "variants: [grpo, mine.yaml]\n")
    assert _validate_errors(p) == [f"arm mine: {p}: key 'variants[1]': variant file mine.yaml does not exist"]


@pytest.mark.parametrize(
    "body, want",
    [
        ("variants: grpo\n", "key 'variants': expected a list of variants, each a registry name (`grpo`; "),
        ("variants: [3]\n", "key 'variants.0': expected a variant: a registry name (`grpo`; `zoo list` lists"),
        ("ablations: {x: {variant: 3}}\n", "key 'ablations.x.variant': expected a variant: a registry name"),
        ("variants: [grpo]\nrewards: correctness\n", "key 'rewards': expected a list of rewards, each a name"),
    ],
)
def test_a_wrong_type_in_a_study_says_the_key_and_the_forms(tmp_path, body, want):
    p = _study(tmp_path, body)
    if "rewards:" in body:  # the study's own rewards line is replaced, not repeated
        p.write_text(p.read_text().replace("rewards: [{name: arm_bernoulli, p: {a: 0.9, b: 0.1}}]\n", ""))
    errors = _validate_errors(p)
    assert len(errors) == 1 and errors[0].startswith(f"{p}: {want}"), errors
    assert "variant file path" in errors[0] or "{name: <reward>, weight: <w>" in errors[0]


def test_a_sweep_and_a_set_of_async_max_staleness_take_yaml_integers_not_strings(tmp_path):
    """experiments/staleness.yaml's sweep and staleness_lm.yaml's ablation `set`, on the tiny study: the
    YAML integers give one arm per k; a quoted k in the sweep is refused naming the arm and the key."""
    body = (
        "async: {max_staleness: 0, backend: simulated}\nsweep: {async.max_staleness: [0, 1, 2, 4]}\n"
        "variants: [grpo]\nablations: {k4: {variant: grpo, set: {async.max_staleness: 4}}}\n"
    )
    arms = expand_arms(load_study(_study(tmp_path, body.replace("sweep", "# sweep"))))
    assert [(a.label, async_opts(a.config).max_staleness) for a in arms] == [("grpo-s0", 0), ("k4-s0", 4)]
    arms = expand_arms(load_study(_study(tmp_path, body.replace("ablations", "# ablations"))))
    assert [async_opts(a.config).max_staleness for a in arms] == [0, 1, 2, 4]
    with pytest.raises(VariantError) as e:
        expand_arms(load_study(_study(tmp_path, body.replace("[0, 1, 2, 4]", "[0, '1']").replace("abl", "# abl"))))
    assert "(arm grpo-async.max_staleness=1-s0): key 'async.max_staleness': expected an integer >= 0" in str(e.value)


def test_a_set_key_of_neither_kind_lists_the_variant_keys_and_the_run_keys(tmp_path):
    """`set: {bogus.key: 1}` in an ablation: the error lists the run-config keys a `set` may hold
    (zoo.study.experiment.ABLATION_RUN_KEYS) besides the variant's slots and fields, and the close
    key among both (`rewardz` -> `rewards`); `zoo run` on the one-arm study says the same."""
    from zoo.study.experiment import ABLATION_RUN_KEYS

    p = _study(tmp_path, "ablations: {x: {variant: grpo, set: {bogus.key: 1}}}\n")
    (err,) = _validate_errors(p)
    assert err.startswith(
        "arm x: ablations.x.set: key 'bogus.key' is neither a variant slot/field nor a run-config key a `set` "
        "may hold; variant slots and fields: advantage, aggregate, base, clip, "
    )
    assert err.endswith(f"; run-config keys: {', '.join(ABLATION_RUN_KEYS)}") and "async" in ABLATION_RUN_KEYS
    with pytest.raises(VariantError) as e:
        load_run_config(p)
    assert str(e.value) == err.removeprefix("arm x: ")
    (err,) = _validate_errors(_study(tmp_path, "variants: [grpo]\nset: {rewardz: [correctness]}\n"))
    assert err.startswith("arm grpo: set (--set): key 'rewardz' is neither") and "(did you mean 'rewards'?)" in err


def test_an_arm_with_an_unknown_variant_or_set_key_still_shares_the_other_arms_errors(tmp_path):
    """The arms' other checks still run: a reward typo every arm has is said once, for all 3 arms."""
    body = "variants: [grpo, grpoo]\nablations: {x: {variant: grpo, set: {bogus: 1}}}\n"
    p = _study(tmp_path, body)
    p.write_text(p.read_text().replace("name: arm_bernoulli,", "name: arm_bernoulliz,"))
    errors = _validate_errors(p)
    assert errors[0].startswith("all 3 arms: rewards: reward 'arm_bernoulliz' is not registered"), errors
    assert [e.split(":")[0] for e in errors[1:]] == ["arm grpoo", "arm x"]
