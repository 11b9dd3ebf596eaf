"""The `zoo` command line as a user types it (typer's CliRunner, no model loaded)."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app
from zoo.cli import main as _main  # noqa: F401  (importing main's modules registers run/ablate/...)
from zoo.config.variant import available_variants
from zoo.core import registry

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _commands():
    import zoo.cli.bench  # noqa: F401
    import zoo.cli.run  # noqa: F401


def test_list_json_names_every_component_and_variant():
    out = json.loads(runner.invoke(app, ["list", "--json"]).stdout)
    for kind in registry.KINDS:
        assert out[kind] == registry.available(kind)
    assert {"ppo", "grpo", "dapo", "mo_grpo", "dr_grpo", "rloo", "gspo", "reinforce_pp", "gdpo"} <= set(out["variants"])
    for name in ("gae", "group_mean", "rloo", "reinforce", "reinforce_pp"):
        assert name in out["advantage"]
    assert set(out["clip"]) == {
        "ppo",
        "clip_higher",
        "dual_clip",
        "gspo",
        "cispo",
        "none",
        "sapo",
        "gmpo",
        "two_sided_clip",
        "clip_cov",
        "kl_cov",
        "dppo",
        "gpg",
        "dro",
        "vespo",
        "luspo",
        "bypass",
    }
    assert {"sapo", "gmpo", "cispo", "clip_cov", "kl_cov", "dppo", "lite_ppo", "gpg", "grpo_bypass"} <= set(
        out["variants"]
    )
    assert "off_policy_sequence_mask" in out["correction"]


def test_show_and_diff():
    r = runner.invoke(app, ["show", "dapo", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["slots"]["clip"] == {"name": "clip_higher", "eps_low": 0.2, "eps_high": 0.28}
    assert d["updates"] == {"epochs": 1, "minibatches": 16} and d["slots"]["kl"]["placement"] == "none"
    r = runner.invoke(app, ["diff", "grpo", "dapo", "--json"])
    rows = {x["key"]: (x["grpo"], x["dapo"]) for x in json.loads(r.stdout)}
    assert rows["slots.clip.name"] == ("ppo", "clip_higher")
    assert rows["slots.aggregate.name"] == ("seq_mean_token_mean", "token_mean")
    assert rows["slots.length.overlong_filter"] == (None, "on")
    # grpo's empty filter list is not shown as a row of its own (it would read as "dapo has no filter")
    assert "slots.filter" not in rows and rows["slots.filter.dynamic_sampling.metric"] == (None, "accuracy")


def test_show_ppo_says_verl_applies_dual_clip_and_we_do_not():
    # verl's vanilla policy loss always bounds A < 0 losses at c = 3; ours only in dual_clip
    r = runner.invoke(app, ["show", "ppo"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "verl" in r.output and "dual-clip with c = 3" in r.output
    import torch

    logp, old, adv, mask = torch.tensor([[2.302585]]), torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1)
    assert registry.build("clip", "ppo")(logp, old, adv, mask).loss.item() == pytest.approx(10.0, rel=1e-5)  # ratio 10
    assert registry.build("clip", "dual_clip")(logp, old, adv, mask).loss.item() == pytest.approx(3.0)  # c = 3


def test_validate_registry_ok_and_unknown_component_fails(tmp_path):
    files = [str(p) for p in sorted((ROOT / "registry").glob("*.yaml"))]
    assert runner.invoke(app, ["validate", *files]).exit_code == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbase: grpo\nslots:\n  clip: clip_hihger\n")
    r = runner.invoke(app, ["validate", str(bad), "--json"])
    assert r.exit_code == 1
    err = json.loads(r.stdout)[0]["errors"][0]
    assert "did you mean 'clip_higher'" in err and "bad.yaml" in err and "slots.clip" in err


def test_validate_names_file_and_key_of_a_typo(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text("name: typo\nbase: grpo\nslots:\n  clpi: ppo\n")
    r = runner.invoke(app, ["validate", str(bad), "--json"])
    err = json.loads(r.stdout)[0]["errors"][0]
    assert r.exit_code == 1 and "typo.yaml" in err and "slots.clpi" in err and "did you mean 'clip'" in err


def test_every_shipped_study_dry_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for study in sorted((ROOT / "experiments").glob("*.yaml")):
        if "tta" in yaml.safe_load(study.read_text()):  # a `zoo tta` study: `zoo validate` checks it (tests/study)
            continue
        r = runner.invoke(app, ["ablate", str(study), "--dry-run", "--write-configs"])
        assert r.exit_code == 0, (study, r.output)
        assert "zoo run runs/" in r.stdout


def test_ablate_set_reaches_every_arm(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(
        app,
        [
            "ablate",
            str(ROOT / "experiments/quickstart.yaml"),
            "--dry-run",
            "--write-configs",
            "--set",
            "budget.steps=2",
            "--set",
            "variants=[grpo, dapo]",
        ],
    )
    assert r.exit_code == 0, r.output
    arms = sorted(p.name for p in (tmp_path / "runs/quickstart").iterdir() if p.is_dir())
    assert arms == ["dapo-s0", "grpo-s0"]
    for arm in arms:
        cfg = yaml.safe_load((tmp_path / "runs/quickstart" / arm / "config.yaml").read_text())
        assert cfg["budget"]["steps"] == 2


def test_run_reports_a_bad_override_without_a_traceback():
    r = runner.invoke(app, ["run", str(ROOT / "examples/run_grpo.yaml"), "--set", "budgett.steps=2"])
    assert r.exit_code == 1 and "did you mean 'budget'" in r.output and "Traceback" not in r.output


def test_variants_listed_are_loadable():
    assert len(available_variants()) >= 9


def test_run_refuses_an_empty_file(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    r = runner.invoke(app, ["run", str(empty)])
    assert r.exit_code == 1 and "empty" in r.output and "Traceback" not in r.output


def test_yaml_exponent_strings_are_numbers_for_numeric_parameters():
    assert registry.build("normalizer", {"name": "group_std", "eps": "1e-6"}).params == {"eps": 1e-6}
    assert registry.build("reward", {"name": "format", "pattern": "12"}).params == {"pattern": "12"}


def test_base_cycle_between_files_is_a_clear_error(tmp_path):
    (tmp_path / "a.yaml").write_text("name: ca\nbase: b.yaml\n")
    (tmp_path / "b.yaml").write_text("name: cb\nbase: a.yaml\n")
    r = runner.invoke(app, ["validate", str(tmp_path / "a.yaml"), "--json"])
    assert r.exit_code == 1 and "cycle a -> b -> a" in json.loads(r.stdout)[0]["errors"][0]


def test_main_prints_errors_without_traceback(tmp_path, capsys, monkeypatch):
    import sys as _sys

    from zoo.cli import main

    monkeypatch.setattr(_sys, "argv", ["zoo", "show", "grpo", "--set", "clip.epsilon=0.3"])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 1 and "did you mean 'eps'" in err and "Traceback" not in err


def test_validate_catches_what_run_would_reject(tmp_path):
    bad = tmp_path / "run.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "variant": "grpo",
                "model": "/no/such/model",
                "rewards": ["correctnes"],
                "budget": {"prompts_per_step": 1, "group_size": 2, "updates": {"epochs": 1, "minibatches": 4}},
            }
        )
    )
    r = runner.invoke(app, ["validate", str(bad), "--json"])
    errs = " ".join(json.loads(r.stdout)[0]["errors"])
    assert r.exit_code == 1
    assert "did you mean 'correctness'" in errs and "minibatches 4 > 2" in errs and "/no/such/model" in errs


def test_ablate_interrupted_says_how_to_resume(tmp_path, monkeypatch):
    from zoo.study import runner as study_runner

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(study_runner, "run_study", interrupted)
    study = str(ROOT / "experiments/quickstart.yaml")
    r = runner.invoke(app, ["ablate", study, "--set", "budget.steps=2"])
    assert r.exit_code == 130
    text = " ".join((r.stdout + (r.stderr or "")).split())
    assert "interrupted" in text and f"zoo ablate {study} --set budget.steps=2" in text


def test_ablate_stopped_by_sigterm_exits_143_like_a_shell(tmp_path, monkeypatch):
    from zoo.study import runner as study_runner

    def terminated(*a, **kw):
        raise KeyboardInterrupt("signal 15")  # what _sigterm_as_interrupt raises

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(study_runner, "run_study", terminated)
    r = runner.invoke(app, ["ablate", str(ROOT / "experiments/quickstart.yaml")])
    assert r.exit_code == 143 and "interrupted" in r.output  # 128 + 15; Ctrl-C stays 130 (above)


def test_sigterm_stops_like_ctrl_c():
    import os
    import signal

    from zoo.cli.stopping import sigterm_as_interrupt

    old = signal.getsignal(signal.SIGTERM)
    try:
        sigterm_as_interrupt()
        with pytest.raises(KeyboardInterrupt, match="signal"):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 1) if hasattr(signal, "sigtimedwait") else None
    finally:
        signal.signal(signal.SIGTERM, old)


def test_fresh_user_mistakes_get_one_clear_line(tmp_path):
    bad_set = runner.invoke(
        app, ["ablate", str(ROOT / "experiments/quickstart.yaml"), "--dry-run", "--set", "budget.steps={"]
    )
    assert bad_set.exit_code == 1 and "--set 'budget.steps={': the value is not valid YAML" in " ".join(
        bad_set.output.split()
    )
    plot = runner.invoke(app, ["bench", "--plot", str(tmp_path / "x.png")])
    assert plot.exit_code == 1 and "--plot draws a --scan" in plot.output
    run_file = tmp_path / "typo.yaml"
    run_file.write_text("name: t\nvarient: grpo\n")
    r = runner.invoke(app, ["validate", str(run_file)])
    assert r.exit_code == 1 and "did you mean 'variant'" in r.output  # read as a run file, not a variant file
    r = runner.invoke(app, ["run", str(ROOT / "registry/grpo.yaml")])
    assert r.exit_code == 1 and "this is a variant file" in " ".join(r.output.split())
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("name: run\n")
    (tmp_path / "file.yaml").write_text("x")
    r = runner.invoke(app, ["export", str(tmp_path / "run"), str(tmp_path / "file.yaml")])
    assert r.exit_code == 1 and "exists and is a file" in " ".join(r.output.split())
    # nothing is overwritten: not the run folder itself, not a folder that holds files
    r = runner.invoke(app, ["export", str(tmp_path / "run"), str(tmp_path / "run")])
    assert r.exit_code == 1 and "inside the run directory" in " ".join(r.output.split())
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "model.safetensors").write_text("an older export")
    r = runner.invoke(app, ["export", str(tmp_path / "run"), str(tmp_path / "full")])
    assert r.exit_code == 1 and "exists and is not empty" in " ".join(r.output.split())
    assert (tmp_path / "full" / "model.safetensors").read_text() == "an older export"


def test_dry_run_commands_are_shell_quoted():
    from zoo.study.runner import run_command

    assert run_command(Path("runs/a b/x$(y)/config.yaml")) == "zoo run 'runs/a b/x$(y)/config.yaml'"


# --------------------------------------------------------------------------- one line, no traceback


def run_main(monkeypatch, capsys, *args):
    """Run the console entry point as a user would; returns (exit code, stderr + stdout)."""
    import sys as _sys

    from zoo.cli import main

    monkeypatch.setattr(_sys, "argv", ["zoo", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    return e.value.code, " ".join((out.err + out.out).split())


def test_run_and_validate_a_directory(tmp_path, monkeypatch, capsys):
    d = tmp_path / "myrun"
    d.mkdir()
    (d / "config.yaml").write_text("name: myrun\n")
    code, text = run_main(monkeypatch, capsys, "run", d)
    assert code == 1 and "Traceback" not in text and "IsADirectoryError" not in text
    assert f"{d}: is a directory, not a YAML file; to resume the run in it: zoo run --resume {d}" in text
    code, text = run_main(monkeypatch, capsys, "validate", d)
    assert code == 1 and f"{d}: is a directory" in text and "Traceback" not in text


def test_an_empty_mapping_is_an_empty_run_file_not_a_variant(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("{}\n")
    r = runner.invoke(app, ["run", str(f)])
    assert (
        r.exit_code == 1
        and "the file has no keys; a run file needs at least `variant`, `model` or `task`" in " ".join(r.output.split())
    )
    r = runner.invoke(app, ["validate", str(f), "--json"])
    err = json.loads(r.stdout)[0]["errors"]
    assert r.exit_code == 1 and len(err) == 1 and "the file has no keys" in err[0] and "'name'" not in err[0]


@pytest.mark.parametrize("cmd", ["run", "ablate"])
def test_yaml_errors_under_run_and_ablate_name_the_file(tmp_path, cmd):
    f = tmp_path / "study.yaml"
    f.write_text("variants: [grpo]\nbudget: {steps: 2\n")
    r = runner.invoke(app, [cmd, str(f)])
    text = " ".join(r.output.split())
    assert r.exit_code == 1 and f"{f}: not valid YAML:" in text and "<unicode string>" not in text


def test_a_non_utf8_run_file_names_the_file(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_bytes(b'variant: grpo\nname: "\xff"\n')
    r = runner.invoke(app, ["run", str(f)])
    assert r.exit_code == 1 and f"{f}: not UTF-8 text (byte b'\\xff' at offset 21)" in " ".join(r.output.split())


@pytest.mark.parametrize(
    "name,why", [("x" * 300, "at most 200 characters, got 300"), ("a\nb", "no newlines or other control characters")]
)
def test_run_names_that_cannot_be_folders_fail_before_any_folder(tmp_path, monkeypatch, name, why):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({"name": name, "variant": "grpo"}))
    r = runner.invoke(app, ["run", str(f)])
    assert r.exit_code == 1 and why in " ".join(r.output.split()) and not (tmp_path / "runs").exists()


def test_validate_rejects_the_issues_silent_values(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("variant: grpo\nbudget: {steps: true}\noptim: {betas: [2, 3]}\n")
    r = runner.invoke(app, ["validate", str(f), "--json"])
    errs = " ".join(json.loads(r.stdout)[0]["errors"])
    assert r.exit_code == 1
    assert "key 'budget.steps': expected a number, got the boolean true" in errs
    assert "key 'optim.betas.0': Input should be less than 1" in errs


def test_validate_rejects_nan_and_inf_hyperparameters(tmp_path):
    # the user's key first (run.yaml: set.<key> = <value>: why), the registry file and its key after
    for line, msg in (
        ("kl.beta: .inf", "set.kl.beta = inf: Input should be a finite number (applied to "),
        (
            "loss.entropy_bonus.coef: .nan",
            "set.loss.entropy_bonus.coef = nan: loss 'entropy_bonus': "
            "parameter 'coef' must be a finite number, got nan",
        ),
        ("clip.eps: .inf", "set.clip.eps = inf: clip 'ppo': parameter 'eps' must be a finite number"),
    ):
        f = tmp_path / "run.yaml"
        f.write_text(f"variant: grpo\nset: {{{line}}}\n")
        r = runner.invoke(app, ["validate", str(f), "--json"])
        errs = " ".join(json.loads(r.stdout)[0]["errors"])
        assert r.exit_code == 1 and msg in errs, errs


def test_a_missing_registry_path_entry_warns_naming_it(tmp_path, monkeypatch, caplog):
    import os

    from zoo.config import variant_files as variant

    missing = tmp_path / "no-such-dir"
    monkeypatch.setenv("ZOO_REGISTRY_PATH", os.pathsep.join([str(missing), str(ROOT / "registry")]))
    monkeypatch.setattr(variant, "_WARNED_DIRS", set())
    with caplog.at_level("WARNING", logger="zoo.config.variant_files"):
        dirs = variant.search_dirs()
    assert missing not in dirs and ROOT / "registry" in dirs
    assert f"ZOO_REGISTRY_PATH: {missing} is not a directory" in caplog.text


def test_a_hub_id_while_offline_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    f = tmp_path / "run.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "variant": "grpo",
                "model": "no-such-org/no-such-model",
                "tracking": {"wandb": False},
                "task": {
                    "name": "reasoning_gym",
                    "dataset": "basic_arithmetic",
                    "size": 8,
                    "eval_size": 2,
                    "fewshot": 0,
                },
            }
        )
    )
    code, text = run_main(monkeypatch, capsys, "run", f)
    assert code == 1 and "Traceback" not in text and "OSError" not in text
    assert "model 'no-such-org/no-such-model': could not load it from the Hugging Face Hub" in text
    assert "local model directory" in text


def test_ctrl_c_before_the_run_saved_anything_does_not_offer_a_resume(tmp_path, monkeypatch):
    from zoo.run import trainer

    def interrupted_setup(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "setup", interrupted_setup)
    (tmp_path / "config.json").write_text("{}")  # a model folder as far as the checks before setup look
    run_file = tmp_path / "run.yaml"
    run_file.write_text(
        f"name: early\nvariant: grpo\nmodel: {tmp_path}\noutput_dir: {tmp_path / 'out'}\ntracking: {{wandb: false}}\n"
    )
    r = runner.invoke(app, ["run", str(run_file)])
    text = " ".join(r.output.split())
    assert r.exit_code == 130 and "--resume" not in text, text
    assert "interrupted before the run saved anything; run the same command again" in text


def test_version_prints_the_package_version():
    import zoo

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"zoo {zoo.__version__}"
    assert runner.invoke(app, ["list"]).exit_code == 0  # the root callback leaves the commands as they were


def test_validate_checks_the_shipped_reward_model_files_by_their_own_keys(tmp_path):
    # rm.yaml / pairs.yaml were read as run files: "key 'judge' is not allowed (did you mean 'budget'?)"
    files = [str(ROOT / "experiments/reward_hacking" / n) for n in ("rm.yaml", "pairs.yaml")]
    r = runner.invoke(app, ["validate", *files, "--json"])
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and [x["ok"] for x in out] == [True, True], out
    assert "a `zoo rm train` file" in out[0]["notes"][0] and "a `zoo rm pairs` file" in out[1]["notes"][0]
    typo = tmp_path / "rm.yaml"
    typo.write_text((ROOT / "experiments/reward_hacking/rm.yaml").read_text().replace("epochs:", "epoch:"))
    r = runner.invoke(app, ["validate", str(typo), "--json"])
    assert (
        r.exit_code == 1
        and "key 'epoch' is not allowed (did you mean 'epochs'?)" in json.loads(r.stdout)[0]["errors"][0]
    )


def test_an_empty_reward_model_file_says_it_is_empty(tmp_path):
    (tmp_path / "rm.yaml").write_text("# nothing yet\n")
    r = runner.invoke(app, ["rm", "train", str(tmp_path / "rm.yaml")])
    assert r.exit_code == 1 and "the file is empty (or holds only comments)" in str(r.exception)  # main() prints it
