"""zoo/config/set_flag.py by hand: which lines are a `--set`'s, what a key takes, the close keys."""

import pytest

from zoo.config.run import RunConfig
from zoo.config.set_flag import blame_set_flag, close_keys, describe_key


@pytest.mark.parametrize(
    "key, words",
    [
        ("budget.steps", "an integer >= 1"),
        ("budget.group_size", "an integer >= 1 or null"),
        ("optim.lr", "a number > 0"),
        ("training.strategy", "one of 'single', 'ddp', 'fsdp'"),
        ("budget.updates", "a mapping with epochs, minibatches or null"),
        ("task", "a mapping"),
        ("task.size", None),  # the task loaders check their own keys
        ("no.such", None),
    ],
)
def test_describe_key(key, words):
    assert describe_key(key, RunConfig) == words
    assert describe_key(key, None) is None


def test_close_keys():
    assert close_keys("stesp", RunConfig) == ["budget.steps"]
    assert close_keys("lr", RunConfig) == ["optim.lr"]
    assert close_keys("strategy", RunConfig) == ["training.strategy"]
    assert close_keys("bogus.key", RunConfig) == []


def test_blame_rewrites_only_the_lines_of_a_set_key():
    msg = (
        "run.yaml: key 'budget.steps': Input should be greater than or equal to 1\n"
        "run.yaml: key 'optim.lr': Input should be greater than 0"
    )
    out = blame_set_flag(msg, {"budget.steps": 0}, RunConfig).splitlines()
    assert out == [
        "--set budget.steps=0: must be >= 1; budget.steps takes an integer >= 1 (--set overrides run.yaml)",
        "run.yaml: key 'optim.lr': Input should be greater than 0",  # the file's own value
    ]
    assert blame_set_flag(msg, {}) == msg


def test_blame_keeps_the_arm_and_names_a_key_inside_a_mapping():
    msg = "arm grpo: study.yaml (--set): key 'budget.steps': Input should be a valid integer"
    assert blame_set_flag(msg, {"budget": {"steps": "abc"}}, RunConfig) == (
        "arm grpo: --set budget={steps: abc}: key 'budget.steps': Input should be a valid integer; "
        "budget.steps takes an integer >= 1 (--set overrides study.yaml)"
    )


def test_blame_a_variant_override_line():
    msg = "run.yaml: set.kl.beta = -1: must be >= 0 (applied to registry/grpo.yaml, key 'slots.kl.beta')"
    assert blame_set_flag(msg, {"set.kl.beta": -1}, RunConfig) == (
        "--set set.kl.beta=-1: must be >= 0 (applied to registry/grpo.yaml, key 'slots.kl.beta') (--set overrides run.yaml)"
    )
