"""zoo.run.fingerprint and `zoo run`'s reuse rule on the tiny model."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
import yaml
from conftest import tiny_run_config
from typer.testing import CliRunner

from zoo.config.run import RunConfig
from zoo.run import fingerprint as fp
from zoo.run.tracking import read_jsonl
from zoo.run.trainer import train


def _cfg(**over) -> RunConfig:
    return RunConfig.model_validate({"variant": "grpo", "model": "m", "tracking": {"wandb": False}, **over})


# --------------------------------------------------------------------------- the fingerprint


def test_digest_is_sha256_of_canonical_json():
    digest, fields = fp.fingerprint(_cfg())
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    from zoo.run.precision import resolve_autocast

    # `auto` (the default) is hashed as what it resolves to on this machine, never as "auto"
    assert fields["generator"] == "hf" and fields["precision"] == resolve_autocast("auto", torch.device("cpu"))[0]
    assert fields["precision"] in ("none", "bf16")
    assert fp.fingerprint(_cfg(model_opts={"autocast": "none"}))[1]["precision"] == "none"
    assert fields["variant"]["name"] == "grpo" and fields["variant"]["slots"]["clip"]["name"] == "ppo"


def test_fields_ignore_name_output_dir_eval_tracking():
    a = fp.fingerprint(_cfg())[0]
    b = fp.fingerprint(_cfg(name="other", output_dir="/tmp/x", eval={"size": 3}, tracking={"wandb": False}))[0]
    assert a == b


def test_compare_names_the_dotted_keys_that_changed():
    _, a = fp.fingerprint(_cfg())
    _, b = fp.fingerprint(_cfg(optim={"lr": 0.5}, budget={"steps": 5}))
    assert fp.compare(a, b) == ["budget.steps", "optim.lr"]
    assert fp.describe(a, b, ["optim.lr"]) == "optim.lr: 1e-05 -> 0.5"
    assert fp.compare(a, a) == []


def test_variant_override_and_budget_group_size_change_the_resolved_slots():
    _, a = fp.fingerprint(_cfg())
    _, b = fp.fingerprint(_cfg(set={"clip.eps": 0.3}))
    _, c = fp.fingerprint(_cfg(budget={"group_size": 3}))
    assert fp.compare(a, b) == ["variant.slots.clip.eps"]
    assert "variant.group_size" in fp.compare(a, c) and "budget.group_size" in fp.compare(a, c)


def test_mixed_keys_ignores_the_seed_only():
    _, s0 = fp.fingerprint(_cfg(seed=0))
    _, s1 = fp.fingerprint(_cfg(seed=1))
    _, s1_long = fp.fingerprint(_cfg(seed=1, budget={"steps": 6}))
    assert fp.mixed_keys({"a-s0": s0, "a-s1": s1}) == []
    assert fp.mixed_keys({"a-s0": s0, "a-s1": s1_long, "a-s2": None}) == ["budget.steps"]


def test_check_reuse_rule(tmp_path):
    cfg = _cfg(output_dir=str(tmp_path), budget={"steps": 4})
    assert fp.check_reuse(tmp_path, cfg, "HINT") == "new"
    # a run killed before it wrote anything but its failed summary (e.g. while loading): nothing to protect
    (tmp_path / "summary.json").write_text(json.dumps({"status": "failed", "error": "OutOfMemoryError"}))
    assert fp.check_reuse(tmp_path, cfg, "HINT") == "new"
    (tmp_path / "summary.json").write_text(json.dumps({"status": "finished"}))  # an old run's results
    with pytest.raises(fp.StaleRunError, match="no fingerprint.json.*HINT"):
        fp.check_reuse(tmp_path, cfg, "HINT")
    (tmp_path / "summary.json").unlink()
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(fp.StaleRunError, match="no fingerprint.json.*HINT"):
        fp.check_reuse(tmp_path, cfg, "HINT")
    fp.write_record(tmp_path, cfg)
    assert fp.check_reuse(tmp_path, cfg, "HINT") == "same"
    assert fp.check_reuse(tmp_path, _cfg(budget={"steps": 9}), "HINT") == "grown"
    with pytest.raises(fp.StaleRunError, match=r"budget.steps: 4 -> 2; HINT"):
        fp.check_reuse(tmp_path, _cfg(budget={"steps": 2}), "HINT")
    with pytest.raises(fp.StaleRunError, match=r'optim.schedule: "constant" -> "cosine"'):
        fp.check_reuse(tmp_path, _cfg(budget={"steps": 9}, optim={"schedule": "cosine"}), "HINT")
    fp.write_record(tmp_path / "cos", _cfg(budget={"steps": 4}, optim={"schedule": "cosine"}))
    with pytest.raises(fp.StaleRunError, match=r"budget.steps grew \(4 -> 9\).*'cosine'"):
        fp.check_reuse(tmp_path / "cos", _cfg(budget={"steps": 9}, optim={"schedule": "cosine"}), "HINT")
    with pytest.raises(fp.StaleRunError, match=r"budget.steps: 4 -> 9, optim.warmup_steps: 0 -> 2"):
        fp.check_reuse(tmp_path, _cfg(budget={"steps": 9}, optim={"warmup_steps": 2}), "HINT")


# --------------------------------------------------------------------------- zoo run on the tiny model


def test_run_records_fingerprint_and_refuses_a_changed_variant(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path / "r", budget={"steps": 1})
    summ = train(cfg, progress=False)
    digest, fields = fp.fingerprint(cfg)
    assert summ["fingerprint"] == digest and summ["fingerprint_fields"] == fields
    assert yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())["fingerprint"]["digest"] == digest
    assert json.loads((tmp_path / "r" / "fingerprint.json").read_text())["digest"] == digest
    assert train(cfg, progress=False)["steps"] == 1  # same config: already finished
    ppo = tiny_run_config(tiny_model_dir, tmp_path / "r", variant="ppo", budget={"steps": 1})
    with pytest.raises(fp.StaleRunError, match=r'variant.name: "grpo" -> "ppo".*--fresh'):
        train(ppo, progress=False)
    lr = tiny_run_config(tiny_model_dir, tmp_path / "r", budget={"steps": 1}, optim={"lr": 0.5})
    with pytest.raises(fp.StaleRunError, match=r"optim.lr: 0.001 -> 0.5"):
        train(lr, progress=False)
    again = train(ppo, resume=False, progress=False)  # --fresh retrains it as ppo
    assert again["fingerprint"] == fp.fingerprint(ppo)[0] and again["config"]["resolved_variant"]["name"] == "ppo"


def test_grown_steps_continue_under_constant_schedule_only(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path / "c", budget={"steps": 1})
    train(cfg, progress=False)
    more = tiny_run_config(tiny_model_dir, tmp_path / "c", budget={"steps": 2})
    summ = train(more, progress=False)
    assert summ["status"] == "finished" and summ["steps"] == 2
    steps = [r["step"] for r in read_jsonl(tmp_path / "c" / "metrics.jsonl") if "reward/total" in r]
    assert steps == [1, 2]  # step 1 kept from the first run, step 2 continued, nothing twice
    lin = tiny_run_config(tiny_model_dir, tmp_path / "l", budget={"steps": 1}, optim={"schedule": "linear"})
    train(lin, progress=False)
    lin3 = tiny_run_config(tiny_model_dir, tmp_path / "l", budget={"steps": 3}, optim={"schedule": "linear"})
    with pytest.raises(fp.StaleRunError, match="budget.steps grew.*'linear'"):
        train(lin3, progress=False)


def test_cli_resume_with_another_variant_is_a_clear_error(tiny_model_dir, tmp_path):
    from zoo.cli import app
    from zoo.cli import run as cli_run  # noqa: F401  (registers `zoo run`)

    cfg = tiny_run_config(tiny_model_dir, tmp_path / "g", budget={"steps": 1})
    train(cfg, progress=False)
    r = CliRunner().invoke(app, ["run", "--resume", str(tmp_path / "g"), "--set", "variant=ppo"])
    assert r.exit_code == 1, r.output
    assert 'variant.name: "grpo" -> "ppo"' in r.output and "Traceback" not in r.output
    assert json.loads((tmp_path / "g" / "summary.json").read_text())["config"]["variant"] == "grpo"


def test_run_on_a_folder_another_process_trains_names_the_holder(tiny_model_dir, tmp_path):
    import os
    import threading

    from zoo.run import lock

    cfg = tiny_run_config(tiny_model_dir, tmp_path / "busy", budget={"steps": 1})
    held, done = threading.Event(), threading.Event()

    def hold():
        with lock.locked(cfg.out_dir() / lock.LOCK_NAME, what="x"):
            held.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    try:
        with pytest.raises(
            lock.LockedError, match=rf"run folder {cfg.out_dir()} is in use by pid {os.getpid()} on host"
        ):
            train(cfg, progress=False)
    finally:
        done.set()
        t.join()
    assert not (tmp_path / "busy" / "metrics.jsonl").exists()


def test_critic_warmup_enters_the_fingerprint_only_when_set(tmp_path):
    # value pretraining changes the training, so it changes the digest; unset it leaves the fields
    # (and the digests of runs recorded before the option existed) as they were
    base = RunConfig.model_validate({"variant": "ppo"})
    warm = RunConfig.model_validate({"variant": "ppo", "budget": {"critic_warmup": 2}})
    fb, fw = fp.fingerprint(base)[1], fp.fingerprint(warm)[1]
    assert "critic_warmup" not in fb["budget"] and "critic_warmup" not in fb["variant"]
    assert fw["variant"]["critic_warmup"] == 2 and fp.compare(fb, fw) == [
        "budget.critic_warmup",
        "variant.critic_warmup",
    ]


def test_the_way_out_of_a_changed_config_names_output_dir_when_the_file_sets_it(tiny_model_dir, tmp_path):
    """`--set name=NEW` does not move a run whose file sets output_dir: the hint says output_dir then."""
    from conftest import tiny_run_config

    from zoo.run.fingerprint import StaleRunError
    from zoo.run.trainer import train

    cfg = tiny_run_config(tiny_model_dir, tmp_path / "r", budget={"steps": 1})
    train(cfg, progress=False)
    changed = tiny_run_config(tiny_model_dir, tmp_path / "r", budget={"steps": 1}, optim={"lr": 2e-3})
    with pytest.raises(StaleRunError, match=r"write it elsewhere \(--set output_dir=NEW_DIR\)"):
        train(changed, progress=False)


def test_issue34_parameters_at_their_defaults_leave_the_fingerprint():
    # kl.bias_correction false, gspo's advantage row_mean and tis's C_low null were added later: at
    # their defaults the resolved slots are what they were, so older runs' digests stay valid
    plain = fp.fingerprint(_cfg(set={"correction": [{"name": "tis"}]}))[1]["variant"]["slots"]
    assert "bias_correction" not in plain["kl"] and "C_low" not in plain["correction"][0]
    gspo = fp.fingerprint(_cfg(variant="gspo"))[1]["variant"]["slots"]["clip"]
    assert "advantage" not in gspo
    on = _cfg(set={"kl": {"placement": "loss", "beta": 0.04, "bias_correction": True}})
    assert fp.fingerprint(on)[1]["variant"]["slots"]["kl"]["bias_correction"] is True
    token = fp.fingerprint(_cfg(variant="gspo", set={"clip": {"name": "gspo", "advantage": "token"}}))[1]
    assert token["variant"]["slots"]["clip"]["advantage"] == "token"
