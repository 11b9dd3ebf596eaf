"""`zoo validate` checks a run's `async:` block before any model loads (zoo/checks/async_run.py and
the schema, zoo/config/run_sections.py `Async`): each refusal names the key and what is allowed."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

import zoo.cli.run  # noqa: F401  (registers `run`, `ablate`)
from zoo.checks import before_load
from zoo.cli import app
from zoo.config.run import RunConfig, async_opts, parse_run_config


def _errors(**data):
    rep, _ = before_load(RunConfig.model_validate(data))
    return [e for e in rep.errors if "async" in e]


def test_no_block_is_the_synchronous_run_and_a_block_reads_back():
    assert async_opts(RunConfig()) is None
    cfg = parse_run_config({"async": {"max_staleness": 2, "workers": 3}}, "run.yaml")
    a = async_opts(cfg)
    assert (a.max_staleness, a.workers, a.backend) == (2, 3, "thread")
    assert RunConfig.model_validate(cfg.model_dump(mode="json")) == cfg  # an arm's config.yaml reads back


@pytest.mark.parametrize(
    "block, message",
    [
        ({"max_staleness": -1}, "key 'async.max_staleness': Input should be greater than or equal to 0"),
        ({"workers": 2}, "key 'async.max_staleness': Field required"),
        ({"max_staleness": 1, "workers": 0}, "key 'async.workers': Input should be greater than or equal to 1"),
        ({"max_staleness": 1, "backend": "mp"}, "key 'async.backend': Input should be 'thread', 'ray' or 'simulated'"),
        (
            {"max_staleness": 1, "stale": 2},
            "key 'async.stale' is not allowed; allowed: max_staleness, workers, backend",
        ),
    ],
)
def test_the_schema_names_the_key_and_the_allowed_values(block, message):
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_run_config({"async": block}, "run.yaml")


@pytest.mark.parametrize("value, shown", [(False, "false"), (3, "3"), ("yes", "'yes'"), ([1], "[1]")])
def test_a_non_mapping_block_names_the_key_async_and_its_keys_not_the_class(value, shown):
    with pytest.raises(Exception) as e:
        parse_run_config({"async": value}, "run.yaml")
    assert str(e.value) == (
        f"run.yaml: key 'async': must be a mapping of max_staleness (required), workers, backend, or null; got {shown}"
    )


def test_workers_beyond_the_groups_in_flight_are_refused_and_simulated_workers_warned(tmp_path):
    """B x (k + 1) groups at most are dispatched and untrained (zoo.step.pacing.capacity): with
    prompts_per_step 4 and max_staleness 1 that is 8 workers; simulated has none to set."""
    budget = {"prompts_per_step": 4}
    assert _errors(budget=budget, **{"async": {"max_staleness": 1, "workers": 8}}) == []
    (e,) = _errors(budget=budget, **{"async": {"max_staleness": 1, "workers": 9}})
    assert e.startswith("key 'async.workers': 9 is more than the 8 groups the capacity rule lets be in flight")
    assert e.endswith("set async.workers to 1..8")
    rep, _ = before_load(
        RunConfig.model_validate({"async": {"max_staleness": 1, "backend": "simulated", "workers": 9}})
    )
    assert rep.ok and [w for w in rep.warnings if "async" in w] == [
        "key 'async.workers': 9 is not used: backend simulated has no rollout workers (it samples in the trainer's "
        "process with the weights of step s - max_staleness); remove async.workers, or use backend thread or ray "
        "for workers"
    ]
    rep, _ = before_load(RunConfig.model_validate({"async": {"max_staleness": 1, "backend": "simulated"}}))
    assert not [w for w in rep.warnings if "async" in w]  # workers not written: nothing to say
    # a study's arm config is dumped with the default written out (workers: 1): still nothing to say
    dumped = {"async": {"max_staleness": 1, "backend": "simulated", "workers": 1}}
    rep, _ = before_load(RunConfig.model_validate(dumped))
    assert not [w for w in rep.warnings if "async" in w]
    f = tmp_path / "run.yaml"  # a run file: the message leads with it
    f.write_text(yaml.safe_dump({"variant": "grpo", "async": {"max_staleness": 0, "workers": 100}}))
    r = CliRunner().invoke(app, ["validate", str(f)])
    assert r.exit_code == 1 and f"{f}: key 'async.workers': 100 is more than the" in " ".join(r.output.split())


def test_combinations_the_async_step_does_not_run_are_refused_before_loading():
    a = {"max_staleness": 1}
    assert _errors(**{"async": a}) == []
    assert (
        "sampling.backend 'noisy' is not supported"
        in _errors(**{"async": a, "sampling": {"backend": {"name": "noisy", "sigma": 0.1}}})[0]
    )
    assert "the variant's sampling filters" in _errors(**{"async": a, "variant": "dapo"})[0]
    assert "task.env" in _errors(**{"async": a, "task": {"name": "arithmetic", "env": "calculator"}})[0]
    msg = _errors(**{"async": a, "variant": "remax"})[0]
    assert "slots.advantage: an advantage estimator with a greedy baseline (remax)" in msg and "remove async" in msg


def test_zoo_validate_refuses_a_bad_block_without_loading(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({"model": "/nonexistent-model", "async": {"max_staleness": "x"}}))
    res = CliRunner().invoke(app, ["validate", str(f)])
    assert res.exit_code != 0
    assert "async.max_staleness" in res.output
