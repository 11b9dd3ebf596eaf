"""One check pipeline (zoo/checks): `zoo validate` refuses exactly what `zoo run` refuses, with the
same message (validate prefixes the arm), and `zoo ablate` what `zoo validate` refuses for a study."""
from __future__ import annotations

import json

import pytest
import yaml
from conftest import tiny_run_config
from typer.testing import CliRunner

import zoo.cli.run  # noqa: F401  (registers `run`, `ablate`)
from zoo.cli import app

runner = CliRunner()


def _bad_cases(tmp_path, model_dir):
    empty = tmp_path / "empty-rm"
    empty.mkdir(exist_ok=True)
    from transformers import AutoConfig

    limit = AutoConfig.from_pretrained(model_dir).max_position_embeddings
    return {  # name: (run-config overrides, a part of the one message both must give, loads the policy)
        "unknown reward": ({"rewards": ["correctnes"]}, "did you mean 'correctness'", False),
        "unknown gold": ({"gold": ["correctnes"]}, "gold: ", False),
        "minibatches": ({"budget": {"prompts_per_step": 1, "group_size": 2, "updates": {"epochs": 1, "minibatches": 4}}},
                        "budget: updates.minibatches 4 > 2 completions per step", False),
        "model path": ({"model": str(tmp_path / "no" / "such" / "model")}, "does not exist", False),
        "model folder without config.json": ({"model": str(empty)}, "has no config.json", False),
        "fsdp without a launcher": ({"training": {"strategy": "fsdp"}}, "training.strategy fsdp needs a launcher", False),
        "fp16": ({"model_opts": {"autocast": "fp16"}}, "model_opts.autocast fp16 is not supported", False),
        "generator": ({"sampling": {"backend": "vlm"}}, "generator 'vlm' is not registered", False),
        "filter metric": ({"variant": "dapo", "budget": {"updates": {"epochs": 1, "minibatches": 2}},
                           "set": {"filter": [{"name": "dynamic_sampling", "metric": "lenght"}]}},
                          "metric 'lenght' will not exist", False),
        "reward_model folder without config.json": ({"rewards": [{"name": "reward_model", "model": str(empty)}]},
                                                    "no config.json in this directory", False),
        "critic warm-up without a critic": ({"budget": {"critic_warmup": 10}}, "critic_warmup 10 needs a critic", False),
        "critic init unknown": ({"variant": "ppo", "set": {"critic.init": "reference"}},
                                "init must be policy or reward_model, got 'reference'", False),
        "critic init without a reward model": ({"variant": "ppo", "set": {"critic.init": "reward_model"}},
                                               "needs a reward model in rewards:", False),
        "override typo": ({"set": {"clip.eps_hgh": 0.3}}, "set: clip.eps_hgh=0.3: ", False),
        "plugin": ({"plugins": ["zoo_no_such_plugin_module"]}, "plugins: ", False),
        "context": ({"budget": {"max_new_tokens": limit}}, f"budget.max_new_tokens {limit} >= the model's context", True),
    }


def _write(tmp_path, name, data):
    f = tmp_path / f"{name.replace(' ', '_')}.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def _error_lines(r) -> list[str]:
    text = r.stderr if r.stderr else r.output
    assert "error: " in text, text
    return text[text.index("error: ") + len("error: "):].rstrip("\n").split("\n")  # after any progress bar


def test_validate_and_run_refuse_the_same_configs_with_the_same_message(tiny_model_dir, tmp_path, monkeypatch):
    from zoo import models

    cases = _bad_cases(tmp_path, tiny_model_dir)
    real_load = models.load_policy
    for name, (over, part, loads) in cases.items():
        data = tiny_run_config(tiny_model_dir, tmp_path / "out" / name.replace(" ", "_"), **over).model_dump(mode="json")
        f = _write(tmp_path, name, data)
        v = runner.invoke(app, ["validate", str(f), "--json"])
        (res,) = json.loads(v.stdout)
        assert v.exit_code == 1 and not res["ok"], (name, res)
        if not loads:  # refused before any weights load
            monkeypatch.setattr(models, "load_policy", lambda *a, **k: pytest.fail(f"{name}: the policy loaded"))
        else:
            monkeypatch.setattr(models, "load_policy", real_load)
        r = runner.invoke(app, ["run", str(f)])
        assert r.exit_code == 1, (name, r.output)
        run_lines = _error_lines(r)
        assert any(part in line for line in run_lines), (name, run_lines)
        assert res["errors"] == [f"arm {data['name']}: {line}" for line in run_lines], name


def test_the_same_configs_pass_both(tiny_model_dir, tmp_path):
    """The table's base config is valid: each refusal above comes from its one change."""
    f = _write(tmp_path, "ok", tiny_run_config(tiny_model_dir, tmp_path / "out").model_dump(mode="json"))
    v = runner.invoke(app, ["validate", str(f), "--json"])
    (res,) = json.loads(v.stdout)
    assert v.exit_code == 0 and res["ok"], res
    assert any("parameters" in n for n in res["notes"]), res["notes"]  # after_load ran on a meta-device model


def test_validate_nproc_checks_as_launched(tiny_model_dir, tmp_path, monkeypatch):
    """`zoo validate --nproc N` checks as `zoo run --nproc N` runs: fsdp passes, an uneven split does not."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    f = _write(tmp_path, "fsdp", tiny_run_config(tiny_model_dir, tmp_path / "out", training={"strategy": "fsdp"},
                                                 budget={"prompts_per_step": 3}).model_dump(mode="json"))
    (res,) = json.loads(runner.invoke(app, ["validate", str(f), "--json", "--nproc", "1"]).stdout)
    assert res["ok"], res
    v = runner.invoke(app, ["validate", str(f), "--json", "--nproc", "2"])
    (res,) = json.loads(v.stdout)
    assert v.exit_code == 1 and any("prompts_per_step 3 is not a multiple of the 2 processes" in e
                                    for e in res["errors"]), res


@pytest.mark.parametrize("study_extra, part", [
    ({"ablations": {"typo": {"variant": "grpo", "set": {"clip.eps_hgh": 0.3}}}}, "ablations.typo.set: "),
    ({"training": {"strategy": "fsdp"}}, "training.strategy fsdp needs a launcher"),
    ({"rewards": [{"name": "reward_model", "model": "EMPTY"}]}, "no config.json in this directory"),
])
def test_validate_and_ablate_refuse_the_same_study(tiny_model_dir, tmp_path, monkeypatch, study_extra, part):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    (tmp_path / "empty").mkdir()
    full = tiny_run_config(tiny_model_dir, tmp_path / "out").model_dump(mode="json")
    base = {k: full[k] for k in ("model", "task", "rewards", "budget", "optim", "model_opts", "eval", "tracking",
                                 "output_dir")}
    extra = json.loads(json.dumps(study_extra).replace("EMPTY", str(tmp_path / "empty")))
    f = _write(tmp_path, "study", {**base, "name": "s", "variants": ["grpo"], "seeds": [0, 1], **extra})
    v = runner.invoke(app, ["validate", str(f), "--json"])
    (res,) = json.loads(v.stdout)
    assert v.exit_code == 1 and any(part in e for e in res["errors"]), res
    a = runner.invoke(app, ["ablate", str(f)])
    assert a.exit_code == 1 and _error_lines(a) == res["errors"]
