"""A problem every arm of a study has is said once (`all N arms: ...`), not once per arm; problems
that differ between arms keep their `arm NAME: ` lines (zoo.study.validate.check_arms)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from zoo.checks.registry import Report
from zoo.cli import app
from zoo.study import validate as VAL

STUDY = {
    "name": "demo",
    "budget": {
        "steps": 2,
        "prompts_per_step": 2,
        "max_new_tokens": 16,
        "group_size": 4,
        "updates": {"epochs": 1, "minibatches": 2},
    },
    "tracking": {"wandb": False},
    "seeds": [0, 1],
    "variants": ["grpo", "dapo", "dr_grpo"],
}


TASK = {"name": "reasoning_gym", "dataset": "basic_arithmetic", "fewshot": -1}


def _write(tmp_path: Path, **extra) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump({**STUDY, "output_dir": str(tmp_path / "runs"), **extra}, sort_keys=False))
    return p


def test_a_bad_task_key_every_arm_shares_is_one_error(tmp_path):
    rep = VAL.check_study_file(_write(tmp_path, task=TASK))
    # 3 variants x 2 seeds = 6 arms, one line
    assert rep.errors == ["all 6 arms: task: task key 'fewshot' must be >= 0, got -1"]


def test_shared_and_per_arm_errors_keep_apart(tmp_path):
    # the reward typo is every arm's; the variant override typo only the ablation's
    path = _write(tmp_path, rewards=["correctnes"], ablations={"bad": {"variant": "grpo", "set": {"clp": "ppo"}}})
    rep = VAL.check_study_file(path)
    assert len(rep.errors) == 2, rep.errors
    assert rep.errors[0].startswith("all 8 arms: rewards: reward 'correctnes' is not registered")
    assert rep.errors[1].startswith("arm bad (seeds 0, 1): ablations.bad.set: key 'clp'")


def test_fold_shared_keeps_messages_that_differ():
    a, b = Report(errors=["same", "only a"]), Report(errors=["same"], warnings=["w"])
    rep = VAL.fold_shared([("arm a", a), ("arm b", b)], 2)
    assert rep.errors == ["all 2 arms: same", "arm a: only a"] and rep.warnings == ["arm b: w"]
    one = VAL.fold_shared([("arm a", Report(errors=["x"]))], 1)  # a single arm keeps its name
    assert one.errors == ["arm a: x"]


def test_ablate_and_validate_print_a_shared_error_once(tmp_path):
    path = str(_write(tmp_path, task=TASK))
    runner = CliRunner()
    for args in (["ablate", path, "--dry-run"], ["validate", path]):
        r = runner.invoke(app, args)
        text = r.output
        assert r.exit_code == 1, text
        assert text.count("must be >= 0, got -1") == 1 and "all 6 arms: task:" in " ".join(text.split())
