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
        "minibatches": (
            {"budget": {"prompts_per_step": 1, "group_size": 2, "updates": {"epochs": 1, "minibatches": 4}}},
            "budget: updates.minibatches 4 > 2 completions per step",
            False,
        ),
        "model path": ({"model": str(tmp_path / "no" / "such" / "model")}, "does not exist", False),
        "model folder without config.json": ({"model": str(empty)}, "has no config.json", False),
        "fsdp without a launcher": (
            {"training": {"strategy": "fsdp"}},
            "training.strategy fsdp needs a launcher",
            False,
        ),
        "fp16": ({"model_opts": {"autocast": "fp16"}}, "model_opts.autocast fp16 is not supported", False),
        "generator": ({"sampling": {"backend": "vlm"}}, "generator 'vlm' is not registered", False),
        "filter metric": (
            {
                "variant": "dapo",
                "budget": {"updates": {"epochs": 1, "minibatches": 2}},
                "set": {"filter": [{"name": "dynamic_sampling", "metric": "lenght"}]},
            },
            "metric 'lenght' will not exist",
            False,
        ),
        "reward_model folder without config.json": (
            {"rewards": [{"name": "reward_model", "model": str(empty)}]},
            "no config.json in this directory",
            False,
        ),
        "critic warm-up without a critic": (
            {"budget": {"critic_warmup": 10}},
            "critic_warmup 10 needs a critic",
            False,
        ),
        "critic init unknown": (
            {"variant": "ppo", "set": {"critic.init": "reference"}},
            "init must be policy or reward_model, got 'reference'",
            False,
        ),
        "critic init without a reward model": (
            {"variant": "ppo", "set": {"critic.init": "reward_model"}},
            "needs a reward model in rewards:",
            False,
        ),
        "override typo": (
            {"set": {"clip.eps_hgh": 0.3}},
            "override_typo.yaml: set.clip.eps_hgh = 0.3: clip 'ppo': unknown parameter 'eps_hgh'",
            False,
        ),  # the run file and the user's key first
        "plugin": ({"plugins": ["zoo_no_such_plugin_module"]}, "plugins: ", False),
        "untrusted reward module": (
            {"rewards": ["subprocess:call"]},
            "module 'subprocess' is not among this run's plugins",
            False,
        ),
        "list item twice": ({"set": {"correction": ["tis", "tis"]}}, "'tis' is listed 2 times", False),
        "kl beta with placement none": (
            {"set": {"kl.placement": "none", "kl.beta": 0.1}},
            "kl.placement is 'none', so kl.beta / kl.adaptive have no effect",
            False,
        ),
        "controller without its term": (
            {"set": {"controllers": [{"name": "adaptive_entropy"}]}},
            "sets 'entropy_bonus.coef', but slots.loss has no 'entropy_bonus' term",
            False,
        ),
        "groups of one": ({"budget": {"group_size": 1}}, "group_size 1 < 2", False),
        "unknown variant": ({"variant": "grpoo"}, "grpoo", False),
        "unknown task dataset": (
            {"task": {"dataset": "basic_arithmetc"}},
            "task: reasoning_gym has no dataset 'basic_arithmetc'; close matches: basic_arithmetic",
            False,
        ),
        "unknown env": (
            {"task": {"env": {"name": "calculater"}}},
            "task.env.name: env 'calculater' is not registered; did you mean 'calculator'",
            False,
        ),
        "context": (
            {"budget": {"max_new_tokens": limit}},
            f"budget.max_new_tokens {limit} >= the model's context",
            True,
        ),
    }


def _write(tmp_path, name, data):
    f = tmp_path / f"{name.replace(' ', '_')}.yaml"
    f.write_text(yaml.safe_dump(data))
    return f


def _error_lines(r) -> list[str]:
    text = r.stderr if r.stderr else r.output
    assert "error: " in text, text
    return text[text.index("error: ") + len("error: ") :].rstrip("\n").split("\n")  # after any progress bar


def test_validate_and_run_refuse_the_same_configs_with_the_same_message(tiny_model_dir, tmp_path, monkeypatch):
    from zoo import models

    cases = _bad_cases(tmp_path, tiny_model_dir)
    real_load = models.load_policy
    for name, (over, part, loads) in cases.items():
        data = tiny_run_config(tiny_model_dir, tmp_path / "out" / name.replace(" ", "_"), **over).model_dump(
            mode="json"
        )
        f = _write(tmp_path, name, data)
        v = runner.invoke(app, ["validate", str(f), "--json"])
        (res,) = json.loads(v.stdout)
        assert v.exit_code == 1 and not res["ok"], (name, res)
        if not loads:  # refused before any weights load (the patch is replaced in the next iteration: B023 is moot)
            monkeypatch.setattr(models, "load_policy", lambda *a, **k: pytest.fail(f"{name}: the policy loaded"))  # noqa: B023
        else:
            monkeypatch.setattr(models, "load_policy", real_load)
        r = runner.invoke(app, ["run", str(f)])
        assert r.exit_code == 1, (name, r.output)
        run_lines = _error_lines(r)
        assert any(part in line for line in run_lines), (name, run_lines)
        assert str(f) in (r.stderr or r.output), name  # run names the file its keys are in, as validate does
        assert loads or not (tmp_path / "out" / name.replace(" ", "_")).exists(), name  # refused before its folder
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
    f = _write(
        tmp_path,
        "fsdp",
        tiny_run_config(
            tiny_model_dir, tmp_path / "out", training={"strategy": "fsdp"}, budget={"prompts_per_step": 3}
        ).model_dump(mode="json"),
    )
    (res,) = json.loads(runner.invoke(app, ["validate", str(f), "--json", "--nproc", "1"]).stdout)
    assert res["ok"], res
    v = runner.invoke(app, ["validate", str(f), "--json", "--nproc", "2"])
    (res,) = json.loads(v.stdout)
    assert v.exit_code == 1 and any(
        "prompts_per_step 3 is not a multiple of the 2 processes" in e for e in res["errors"]
    ), res


@pytest.mark.parametrize(
    "study_extra, part",
    [
        ({"ablations": {"typo": {"variant": "grpo", "set": {"clip.eps_hgh": 0.3}}}}, "ablations.typo.set: "),
        ({"training": {"strategy": "fsdp"}}, "training.strategy fsdp needs a launcher"),
        ({"rewards": [{"name": "reward_model", "model": "EMPTY"}]}, "no config.json in this directory"),
    ],
)
def test_validate_and_ablate_refuse_the_same_study(tiny_model_dir, tmp_path, monkeypatch, study_extra, part):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    (tmp_path / "empty").mkdir()
    full = tiny_run_config(tiny_model_dir, tmp_path / "out").model_dump(mode="json")
    base = {
        k: full[k]
        for k in ("model", "task", "rewards", "budget", "optim", "model_opts", "eval", "tracking", "output_dir")
    }
    extra = json.loads(json.dumps(study_extra).replace("EMPTY", str(tmp_path / "empty")))
    f = _write(tmp_path, "study", {**base, "name": "s", "variants": ["grpo"], "seeds": [0, 1], **extra})
    v = runner.invoke(app, ["validate", str(f), "--json"])
    (res,) = json.loads(v.stdout)
    assert v.exit_code == 1 and any(part in e for e in res["errors"]), res
    a = runner.invoke(app, ["ablate", str(f)])
    assert a.exit_code == 1 and _error_lines(a) == res["errors"]


def test_a_check_is_a_registered_function_of_one_stage():
    from zoo import checks
    from zoo.checks import registry

    assert checks.names("before_load", checks.BEFORE_LOAD)[:2] == ["plugins", "variant"]  # what later checks read
    assert set(checks.BEFORE_LOAD) <= set(checks.names("before_load"))
    assert set(checks.AFTER_LOAD) <= set(checks.names("after_load"))
    with pytest.raises(ValueError, match="stage 'during' is not one of before_load, after_load"):
        checks.check("x", "during")
    with pytest.raises(ValueError, match="check 'strategy' is already registered for stage before_load"):
        checks.check("strategy", "before_load")(lambda s, rep: None)
    try:  # a plugin's check runs after the built-in ones and its lines reach the report
        checks.check("test_no_tiny_lr", "before_load")(
            lambda s, rep: rep.errors.append("optim.lr 1e-12 trains nothing") if s.cfg.optim.lr < 1e-9 else None
        )
        from zoo.config.run import RunConfig

        rep, _ = checks.before_load(RunConfig(optim={"lr": 1e-12}))
        assert rep.errors[-1] == "optim.lr 1e-12 trains nothing"
        assert checks.before_load(RunConfig(optim={"lr": 1e-3}))[0].errors == []
        assert checks.names("before_load", checks.BEFORE_LOAD)[-1] == "test_no_tiny_lr"
    finally:
        registry.CHECKS["before_load"][:] = [c for c in registry.CHECKS["before_load"] if c.name != "test_no_tiny_lr"]


def test_after_load_reads_config_json_and_no_weights(tiny_model_dir, tmp_path, monkeypatch):
    """`zoo validate`'s after_load stage: the context check from config.json and the tokenizer; the
    parameter count from a meta-device model equals the loaded model's."""
    from transformers import AutoModelForCausalLM

    from zoo import checks

    cfg = tiny_run_config(tiny_model_dir, tmp_path)
    _, v = checks.before_load(cfg)
    model_config, tok = checks.model_files(cfg)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("weights loaded"))
    rep = checks.after_load(cfg, v, model_config, tok, rows=[{"prompt": "1 + 2 ="}], available=10**12)
    assert rep.ok, rep.errors
    monkeypatch.undo()
    n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters())
    assert rep.notes == [f"model: {n / 1e6:.1f}M parameters (LlamaForCausalLM, float32 weights {n * 4 / 1e9:.2f} GB)"]
    rep = checks.after_load(cfg, v, model_config, tok, rows=[{"prompt": "1 + 2 ="}], available=10**3)
    assert len(rep.errors) == 1 and "more than the 0.0 GB available" in rep.errors[0]


def test_a_plugin_modules_check_runs_in_validate_and_run(tiny_model_dir, tmp_path, monkeypatch):
    """docs/guides/extending-engine.md §3: a check registered by a `plugins:` module refuses the run in both."""
    from zoo.checks import registry

    (tmp_path / "lab_checks_plugin.py").write_text(
        "from zoo.checks import check\n\n\n@check('lab_lr_ceiling', 'before_load')\n"
        "def lr_ceiling(s, rep):\n    if s.cfg.optim.lr > 1e-4:\n"
        "        rep.errors.append(f'optim.lr {s.cfg.optim.lr} > 1e-4: lower optim.lr')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tiny_run_config(tiny_model_dir, tmp_path / "out", plugins=["lab_checks_plugin"]).model_dump(mode="json")
    f = _write(tmp_path, "lab", data)
    try:
        (res,) = json.loads(runner.invoke(app, ["validate", str(f), "--json"]).stdout)
        r = runner.invoke(app, ["run", str(f)])
        assert res["errors"] == [f"arm {data['name']}: optim.lr 0.001 > 1e-4: lower optim.lr"]
        assert r.exit_code == 1 and _error_lines(r) == ["optim.lr 0.001 > 1e-4: lower optim.lr"]
    finally:
        registry.CHECKS["before_load"][:] = [c for c in registry.CHECKS["before_load"] if c.name != "lab_lr_ceiling"]
