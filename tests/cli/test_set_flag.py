"""`--set` on the command line: `zoo validate` takes it as `zoo run` and `zoo ablate` do, a bad value
is blamed on the flag and not on the file's key, and an unknown key gets the close known keys
(zoo/config/set_flag.py, zoo/cli/validate_file.py)."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _commands():
    import zoo.cli.run  # noqa: F401  (registers run and ablate)


@pytest.fixture
def run_file(tmp_path, tiny_model_dir):
    """A run file that validates: the tiny model, a small arithmetic task, one step."""
    f = tmp_path / "run.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "variant": "grpo",
                "model": str(tiny_model_dir),
                "task": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 16, "eval_size": 4},
                "budget": {"steps": 1, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
                "eval": {"enabled": False},
                "output_dir": str(tmp_path / "out"),
            }
        )
    )
    return f


def _validate(*args: str) -> tuple[int, dict]:
    r = runner.invoke(app, ["validate", *args, "--json"])
    return r.exit_code, json.loads(r.stdout)[0]


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- (a) zoo validate --set


def test_validate_applies_set_as_run_does(run_file):
    code, rep = _validate(str(run_file))
    assert code == 0, rep
    code, rep = _validate(str(run_file), "--set", "budget.prompts_per_step=1", "--set", "budget.updates.minibatches=4")
    assert code == 1 and any("minibatches 4 > 2" in e for e in rep["errors"]), rep  # only with the overrides
    code, rep = _validate(str(run_file), "--set", "budget.steps=2")
    assert code == 0 and rep["ok"], rep


def test_validate_set_refuses_what_run_refuses(run_file):
    """The same --set refused by both commands, with the same message."""
    code, rep = _validate(str(run_file), "--set", "budget.steps=abc")
    r = runner.invoke(app, ["run", str(run_file), "--set", "budget.steps=abc"])
    assert code == 1 and r.exit_code == 1
    assert rep["errors"][0] in _one_line(r.output)


def test_validate_set_on_a_study_as_ablate_applies_it():
    study = str(ROOT / "experiments/quickstart.yaml")
    code, rep = _validate(study, "--set", "variants=[nope]")
    assert code == 1 and "nope" in " ".join(rep["errors"])
    r = runner.invoke(app, ["ablate", study, "--dry-run", "--set", "budget.steps=0"])
    code, rep = _validate(study, "--set", "budget.steps=0")
    assert r.exit_code == 1 and code == 1 and rep["errors"][0] in _one_line(r.output)


def test_validate_set_needs_key_equals_value(run_file):
    r = runner.invoke(app, ["validate", str(run_file), "--set", "budget.steps"])
    assert r.exit_code == 1 and "expected key=value" in r.output


# ---------------------------------------------------------------- (b) a bad value is the flag's


@pytest.mark.parametrize(
    "override, takes",
    [
        ("budget.steps=abc", "budget.steps takes an integer >= 1"),
        ("budget.steps=0", "must be >= 1"),
        ("optim.lr=fast", "optim.lr takes a number > 0"),
        ("training.strategy=foo", "Input should be 'single', 'ddp' or 'fsdp'"),
    ],
)
def test_a_bad_set_value_names_the_flag_not_the_file(run_file, override, takes):
    key = override.split("=")[0]
    r = runner.invoke(app, ["run", str(run_file), "--set", override])
    out = _one_line(r.output)
    assert r.exit_code == 1, out
    assert f"error: --set {override}: " in out and takes in out and f"(--set overrides {run_file})" in out
    assert f"{run_file}: key '{key}'" not in out  # before: blamed on the file's key


def test_a_bad_set_value_in_a_study_names_the_flag():
    study = str(ROOT / "experiments/quickstart.yaml")
    r = runner.invoke(app, ["ablate", study, "--dry-run", "--set", "budget.steps=abc"])
    out = _one_line(r.output)
    assert r.exit_code == 1 and "error: --set budget.steps=abc: " in out and "an integer >= 1" in out


def test_a_task_value_from_set_names_the_flag(run_file):
    code, rep = _validate(str(run_file), "--set", "task.size=abc")
    assert code == 1
    assert any(
        e.endswith(f"--set task.size=abc: must be an integer >= 1, got 'abc' (--set overrides {run_file})")
        for e in rep["errors"]
    ), rep


def test_the_files_own_bad_value_still_names_the_file(tmp_path, run_file):
    data = yaml.safe_load(run_file.read_text())
    data["budget"]["steps"] = "abc"
    run_file.write_text(yaml.safe_dump(data))
    code, rep = _validate(str(run_file), "--set", "budget.max_new_tokens=3")
    assert code == 1 and rep["errors"][0].startswith(f"{run_file}: key 'budget.steps'"), rep


# ---------------------------------------------------------------- (c) did-you-mean for an unknown key


@pytest.mark.parametrize(
    "override, hint",
    [
        ("stesp=3", "did you mean 'budget.steps'?"),
        ("lr=1e-4", "did you mean 'optim.lr'?"),
        ("budgett.steps=3", "did you mean 'budget'?"),
        ("bogus.key=1", "the run-file keys: name, variant, set, model"),
    ],
)
def test_an_unknown_set_key_gets_the_close_known_keys(run_file, override, hint):
    r = runner.invoke(app, ["run", str(run_file), "--set", override])
    out = _one_line(r.output)
    assert r.exit_code == 1 and f"error: --set {override}: unknown key" in out and hint in out, out


# ---------------------------------------------------------------- task.size below budget.prompts_per_step


def test_validate_warns_when_a_step_wants_more_prompts_than_the_task_has(run_file):
    """16 training prompts and 2 per step: nothing said; 20 per step: a warning naming both keys and
    numbers (the stream cycles, so the run works with repeated prompts); far above the task (> 4x its
    rows) the after-load warning says it instead, once."""
    code, rep = _validate(str(run_file))
    assert code == 0 and not [w for w in rep["warnings"] if "training prompts" in w]
    code, rep = _validate(str(run_file), "--set", "budget.prompts_per_step=20")
    assert code == 0 and rep["ok"]
    assert [w for w in rep["warnings"] if "training prompts" in w] == [
        "arm run: budget.prompts_per_step 20 > the task's 16 training prompts (task.size): each step takes 20 "
        "prompts from 16, so it repeats prompts within the step (the prompt stream starts its next pass inside "
        "the batch), about 1.25x each; raise task.size or lower budget.prompts_per_step to 16 or less"
    ]
    code, rep = _validate(str(run_file), "--set", "budget.prompts_per_step=200")
    repeats = [w for w in rep["warnings"] if "prompts" in w and "repeat" in w]
    assert len(repeats) == 1 and repeats[0].startswith("arm run: budget.prompts_per_step = 200 is 10x the task's 20")
