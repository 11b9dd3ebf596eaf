"""Inputs refused before a run starts rather than passing silently or failing late: `zoo validate` checks
gold rewards, the critic warm-up and the `noisy` generator's parameter types; `zoo run --nproc` with
`training.strategy: single` stops before torchrun; prompts per step must split evenly over ranks."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app

runner = CliRunner()


def _validate(tmp_path, data: dict) -> tuple[int, str]:
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({"variant": "grpo", "model": "smollm2-135m-instruct-q4", **data}))
    r = runner.invoke(app, ["validate", str(f), "--json"])
    return r.exit_code, " ".join(json.loads(r.stdout)[0]["errors"])


def test_validate_checks_gold_rewards(tmp_path):
    code, errs = _validate(tmp_path, {"rewards": ["correctness"], "gold": ["nosuch"]})
    assert code == 1 and "gold: " in errs and "nosuch" in errs


@pytest.mark.parametrize(
    "data, key",
    [({"rewards": []}, "rewards"), ({"rewards": ["correctness"], "gold": [{"name": "format", "weight": "x"}]}, "gold")],
)
def test_reward_errors_name_their_key_once(tmp_path, data, key):
    # the check's `rewards: ` lead and resolve_rewards' own made `rewards: rewards: ...` (and `gold: rewards:`)
    code, errs = _validate(tmp_path, data)
    assert code == 1 and f"{key}: " in errs and "rewards: rewards:" not in errs and "gold: rewards:" not in errs


def test_validate_applies_the_budgets_critic_warmup(tmp_path):
    # grpo has no critic: a warm-up of the value model has nothing to train (zoo run refused it only)
    code, errs = _validate(tmp_path, {"rewards": ["correctness"], "budget": {"critic_warmup": 10}})
    assert code == 1 and "critic_warmup 10 needs a critic" in errs


@pytest.mark.parametrize(
    "sigma, seed, message",
    [
        (True, 0, "'sigma' must be a number, got True"),  # a bool is not a number (the registry's type check)
        ("big", 0, "'sigma' must be a number, got 'big'"),  # used to raise a bare TypeError
        (0.5, 1.5, "'seed' must be an integer, got 1.5"),
        (0.5, -5, "seed must be an integer >= 0"),
    ],
)
def test_noisy_generator_parameters_are_typed(tmp_path, sigma, seed, message):
    code, errs = _validate(
        tmp_path, {"rewards": ["correctness"], "sampling": {"backend": {"name": "noisy", "sigma": sigma, "seed": seed}}}
    )
    assert code == 1 and message in errs


def test_nproc_with_strategy_single_is_refused_before_torchrun(tmp_path, monkeypatch):
    from zoo.cli import launch

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(launch, "relaunch", lambda *a: pytest.fail("torchrun started despite strategy single"))
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({"variant": "grpo", "model": "smollm2-135m-instruct-q4", "rewards": ["correctness"]}))
    r = runner.invoke(app, ["run", str(f), "--nproc", "2"])
    text = " ".join((r.stdout + (r.stderr or "")).split())
    assert r.exit_code == 1 and "--nproc 2 with training.strategy single" in text


def test_prompts_per_step_must_split_evenly_over_ranks(tiny_model_dir, tmp_path, monkeypatch):
    # each rank samples prompts_per_step // world_size prompts: 3 over 2 ranks used to train on 2
    from conftest import tiny_run_config

    from zoo.config.variant import VariantError
    from zoo.run.trainer import validate_run

    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"prompts_per_step": 3}, training={"strategy": "ddp"})
    with pytest.raises(VariantError, match="prompts_per_step 3 is not a multiple of the 2 processes"):
        validate_run(cfg)
    validate_run(
        tiny_run_config(tiny_model_dir, tmp_path, budget={"prompts_per_step": 4}, training={"strategy": "ddp"})
    )


def test_an_eval_size_above_the_held_out_prompts_warns_with_both_numbers(tiny_model_dir, tmp_path):
    """The tiny task holds out 4 prompts (conftest: eval_size 4): eval.size 9 evaluates 4, and the
    checks say so (a warning: the run starts); eval.size 4 says nothing."""
    from conftest import tiny_run_config

    from zoo.checks import before_load

    warned = before_load(tiny_run_config(tiny_model_dir, tmp_path / "a", eval={"size": 9, "samples": 0}))[0].warnings
    assert any("eval.size 9 is more than the task's 4 held-out prompts" in w and "uses 4" in w for w in warned), warned
    fits = before_load(tiny_run_config(tiny_model_dir, tmp_path / "b", eval={"size": 4, "samples": 0}))[0].warnings
    assert not any("eval.size" in w for w in fits), fits
