"""A value of the wrong type in a run file says the file, the key and the forms the key takes: `variant: 3`
(a registry name or a variant file path), `rewards: correctness` (a list of names or {name, weight}
mappings); `zoo run` and `zoo validate` say it alike. No model is loaded."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app
from zoo.config.run import async_opts, parse_run_config
from zoo.config.variant import VariantError
from zoo.study.run_file import load_run_config

runner = CliRunner()
BASE = {"variant": "grpo", "model": "arms:a,b", "task": {"name": "bandit", "size": 64}, "tracking": {"wandb": False}}
VARIANT = (
    "expected a variant: a registry name (`grpo`; `zoo list` lists them) or a variant file path (`my_variant.yaml`)"
)
EACH = "a name (`correctness`) or a mapping `{name: <reward>, weight: <w>, <its parameters>}` (`zoo list` lists the rewards)"


@pytest.mark.parametrize(
    "data, want",
    [
        ({"variant": 3}, f"key 'variant': {VARIANT}; got the number 3"),
        ({"variant": ""}, f"key 'variant': {VARIANT}; got an empty string"),
        ({"variant": ["grpo"]}, f"key 'variant': {VARIANT}; got a list [grpo]"),
        (
            {"rewards": "correctness"},
            f"key 'rewards': expected a list of rewards, each {EACH}; got the string 'correctness': "
            "write `rewards: [correctness]`",
        ),
        ({"gold": {"name": "correctness"}}, f"key 'gold': expected a list of rewards, each {EACH}; got a mapping"),
        ({"rewards": ["correctness", 3]}, f"key 'rewards': item 1 is the number 3: each reward is {EACH}"),
        ({"rewards": [{"weight": 1}]}, f"key 'rewards': item 0, {{weight: 1}}, has no 'name': each reward is {EACH}"),
    ],
)
def test_a_wrong_type_says_the_file_the_key_and_what_is_allowed(tmp_path, data, want):
    with pytest.raises(VariantError) as e:
        parse_run_config({**BASE, **data}, "run.yaml")
    assert str(e.value).startswith(f"run.yaml: {want}"), str(e.value)
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({**BASE, **data}))
    with pytest.raises(VariantError) as e:  # zoo run
        load_run_config(f)
    r = runner.invoke(app, ["validate", str(f), "--json"])  # zoo validate
    assert r.exit_code == 1 and json.loads(r.stdout)[0]["errors"] == [str(e.value)]
    assert str(e.value).startswith(f"{f}: {want}")


def test_the_allowed_forms_still_parse():
    cfg = parse_run_config({**BASE, "rewards": ["correctness", {"name": "length", "weight": 0.1}]}, "run.yaml")
    assert cfg.variant == "grpo" and cfg.rewards == ["correctness", {"name": "length", "weight": 0.1}]
    assert parse_run_config({**BASE, "variant": "my_variant.yaml"}, "run.yaml").variant == "my_variant.yaml"


@pytest.mark.parametrize(
    "block, want",
    [
        ({"max_staleness": "2"}, "key 'async.max_staleness': expected an integer >= 0, got the string '2'"),
        ({"max_staleness": 1, "workers": "2"}, "key 'async.workers': expected an integer >= 1, got the string '2'"),
    ],
)
def test_a_quoted_async_integer_is_refused_not_read_as_the_number(block, want):
    """`async: {max_staleness: '2'}` was read as 2 (pydantic's lax mode); now the key and its range."""
    with pytest.raises(VariantError) as e:
        parse_run_config({**BASE, "async": block}, "run.yaml")
    assert str(e.value) == f"run.yaml: {want}: write it without quotes"


def test_a_float_async_integer_is_refused_naming_the_key():
    with pytest.raises(VariantError) as e:
        parse_run_config({**BASE, "async": {"max_staleness": 1.0}}, "run.yaml")
    assert "key 'async.max_staleness': expected an integer >= 0, got the number 1.0: write a whole number" in str(
        e.value
    )


def test_async_integers_from_yaml_still_parse():
    data = yaml.safe_load("async: {max_staleness: 2, workers: 3}")
    opts = async_opts(parse_run_config({**BASE, **data}, "run.yaml"))
    assert (opts.max_staleness, opts.workers) == (2, 3)
