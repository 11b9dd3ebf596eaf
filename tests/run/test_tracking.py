"""zoo.run.tracking: JSONL always, W&B offline by default, W&B failures never stop a run."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.config.run import RunConfig, WandbOpts
from zoo.run import jsonl, tracking
from zoo.run.tracking import Tracker, read_jsonl, resolve_mode


def _wandb_exe() -> str:
    exe = Path(sys.executable).parent / "wandb"
    return str(exe) if exe.exists() else (shutil.which("wandb") or "wandb")


def _inspect(offline_dir: Path) -> list[dict]:
    """Records of an offline run, read back with `wandb leet inspect --json` (environment.md)."""
    out = subprocess.run(
        [_wandb_exe(), "leet", "inspect", "--json", str(offline_dir)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No WANDB_* settings and an empty home: the 'fresh machine' case."""
    for k in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DISABLED", "WANDB_BASE_URL", "NETRC"):
        monkeypatch.delenv(k, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


# --------------------------------------------------------------------------- mode


def test_mode_offline_without_key_online_with_key(no_credentials, monkeypatch):
    assert resolve_mode(WandbOpts()) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_mode(WandbOpts()) == "online"


def test_mode_netrc_entry_counts_as_key(no_credentials):
    (no_credentials / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    assert resolve_mode(WandbOpts()) == "online"


def test_mode_env_and_config(no_credentials, monkeypatch):
    assert resolve_mode(None) == "disabled"  # tracking: {wandb: false}
    assert resolve_mode(WandbOpts(mode="disabled")) == "disabled"
    assert resolve_mode(WandbOpts(mode="online")) == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")  # the machine's choice wins
    assert resolve_mode(WandbOpts(mode="online")) == "offline"
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert resolve_mode(WandbOpts()) == "offline"
    monkeypatch.setenv("WANDB_DISABLED", "true")
    assert resolve_mode(WandbOpts(mode="online")) == "disabled"


def test_tracking_wandb_false_disables(tmp_path):
    cfg = RunConfig.model_validate({"tracking": {"wandb": False}})
    tr = Tracker(tmp_path / "run", config={}, wandb_opts=cfg.tracking.wandb_opts(), name="r")
    tr.log({"reward/total": 1.0}, step=0)
    tr.finish()
    assert tr.mode == "disabled" and tr.run_id is None
    assert not (tmp_path / "run" / "wandb").exists()
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl") == [{"step": 0, "reward/total": 1.0}]


# --------------------------------------------------------------------------- offline files


def test_offline_run_files_hold_the_logged_history(tmp_path, no_credentials):
    import torch

    run_dir = tmp_path / "arm-s0"
    tr = Tracker(
        run_dir,
        config={"variant": "grpo", "budget": {"steps": 3}},
        wandb_opts=WandbOpts(project="zoo-test"),
        name="grpo-s0",
        group="study1",
        job_type="grpo",
        tags=["grpo", "clip=ppo"],
    )
    assert tr.mode == "offline" and tr.run_id
    rewards = [0.25, 0.5, 0.875]
    for step, r in enumerate(rewards):
        tr.log({"reward/total": torch.tensor(r), "kl/ref": 0.01 * step}, step=step)
    tr.log_samples(
        2,
        [
            {"prompt": "1+1=", "completion": "2", "reward/correctness": 1.0},
            {"prompt": "2+2=", "completion": "5", "reward/correctness": 0.0},
        ],
    )
    tr.set_summary({"reward/total": 0.875, "status": "finished"})
    tr.finish()
    tr.finish()  # idempotent

    assert tracking.read_run_id(run_dir) == tr.run_id
    local = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["reward/total"] for r in local] == rewards and [r["step"] for r in local] == [0, 1, 2]
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert [(s["step"], s["completion"]) for s in samples] == [(2, "2"), (2, "5")]

    offline = list((run_dir / "wandb").glob(f"offline-run-*-{tr.run_id}*"))
    assert len(offline) == 1, list((run_dir / "wandb").iterdir())
    recs = _inspect(offline[0])
    hist = [r["history"]["item"] for r in recs if r["type"] == "history"]
    by_step = {h["step"]: h["reward/total"] for h in hist if "reward/total" in h}
    assert by_step == {0: 0.25, 1: 0.5, 2: 0.875}
    assert any(h.get("samples._type") == "table-file" and h["step"] == 2 for h in hist)
    run = next(r["run"] for r in recs if r["type"] == "run")
    assert run["run_group"] == "study1" and run["job_type"] == "grpo" and run["display_name"] == "grpo-s0"
    assert run["tags"] == ["grpo", "clip=ppo"] and run["project"] == "zoo-test"
    assert run["config"]["update"]["budget"] == {"steps": 3}
    summary = {}
    for r in recs:
        if r["type"] == "summary":
            summary.update(r["summary"]["update"])
    assert summary["status"] == "finished" and summary["reward/total"] == 0.875
    assert any(r["type"] == "exit" and r["exit"].get("exit_code", 0) == 0 for r in recs)
    table = next(offline[0].glob("files/media/table/samples_*.table.json"))
    tdata = json.loads(table.read_text())
    assert tdata["columns"] == ["step", "prompt", "completion", "reward/correctness"]
    assert tdata["data"][1] == [2, "2+2=", "5", 0.0]


def test_resume_reuses_the_wandb_run_id(tmp_path, no_credentials):
    run_dir = tmp_path / "run"
    first = Tracker(run_dir, config={}, wandb_opts=WandbOpts(), name="r")
    first.log({"a": 1.0}, step=0)
    first.finish(exit_code=1)
    rid = tracking.read_run_id(run_dir)
    second = Tracker(run_dir, config={}, wandb_opts=WandbOpts(), name="r", resume_id=rid)
    second.log({"a": 2.0}, step=1)
    second.finish()
    assert second.run_id == rid == first.run_id
    assert len(list((run_dir / "wandb").glob(f"offline-run-*-{rid}*"))) == 2


# --------------------------------------------------------------------------- failures


def test_wandb_init_failure_warns_once_and_keeps_jsonl(tmp_path, no_credentials, monkeypatch, caplog):
    import wandb

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(wandb, "init", boom)
    with caplog.at_level(logging.WARNING, logger="zoo.run.tracking"):
        tr = Tracker(tmp_path / "run", config={}, wandb_opts=WandbOpts(), name="r")
        tr.log({"reward/total": 0.5}, step=0)
        tr.log({"reward/total": 0.6}, step=1)
        tr.log_samples(1, [{"prompt": "p", "completion": "c"}])
        tr.set_summary({"x": 1})
        tr.finish()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()
    assert tr.run_id is None and not tr.wandb_enabled
    assert [r["reward/total"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0.5, 0.6]


class _FlakyRun:
    id = "flaky01"

    def __init__(self):
        self.logged, self.finished = [], []
        self.summary = {}

    def define_metric(self, *a, **k):
        pass

    def log(self, d):
        if len(self.logged) == 1:
            raise RuntimeError("disk full")
        self.logged.append(d)

    def finish(self, exit_code=0):
        self.finished.append(exit_code)


def test_wandb_log_failure_disables_wandb_not_training(tmp_path, no_credentials, monkeypatch, caplog):
    import wandb

    fake = _FlakyRun()
    monkeypatch.setattr(wandb, "init", lambda *a, **k: fake)
    with caplog.at_level(logging.WARNING, logger="zoo.run.tracking"):
        tr = Tracker(tmp_path / "run", config={}, wandb_opts=WandbOpts(), name="r")
        assert tr.run_id == "flaky01"
        for s in range(4):
            tr.log({"loss/policy": float(s)}, step=s)
        tr.finish()
    assert [d["step"] for d in fake.logged] == [0]  # second log raised, then W&B is off
    assert fake.finished == [1]
    assert len([r for r in caplog.records if "disk full" in r.getMessage()]) == 1
    assert [r["loss/policy"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0.0, 1.0, 2.0, 3.0]


def test_wandb_import_failure_warns(tmp_path, no_credentials, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with caplog.at_level(logging.WARNING, logger="zoo.run.tracking"):
        tr = Tracker(tmp_path / "run", config={}, wandb_opts=WandbOpts(), name="r")
        tr.log({"a": 1.0}, step=0)
    assert tr.run_id is None and len(caplog.records) == 1
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl") == [{"step": 0, "a": 1.0}]


# --------------------------------------------------------------------------- resume helpers


def test_truncate_after_drops_later_steps_and_torn_lines(tmp_path):
    tr = Tracker(tmp_path / "run", config={}, wandb_opts=None, name="r")
    for s in range(5):
        tr.log({"reward/total": s / 10}, step=s)
    tr.log({"eval/greedy_acc": 0.5}, step=4)
    tr.log_samples(1, [{"completion": "a"}])
    tr.log_samples(3, [{"completion": "b"}])
    with open(tr.metrics_path, "a") as f:
        f.write('{"step": 5, "reward/to')  # a line cut by a crash
    assert tr.truncate_after(2) == 3
    assert [r["step"] for r in read_jsonl(tr.metrics_path)] == [0, 1, 2]
    assert tr.metrics_path.read_text().count("\n") == 3
    assert [r["completion"] for r in read_jsonl(tr.samples_path)] == ["a"]
    tr.log({"reward/total": 0.9}, step=3)
    assert [r["step"] for r in read_jsonl(tr.metrics_path)] == [0, 1, 2, 3]


def test_wandb_tags_name_variant_overrides_and_changed_slots():
    cfg = RunConfig.model_validate(
        {"variant": "dapo", "set": {"clip.eps_high": 0.32}, "tracking": {"wandb": {"tags": ["mine"]}}}
    )
    slots = {
        "clip": {"name": "clip_higher", "eps_low": 0.2},
        "advantage": {"name": "group_mean"},
        "kl": {"placement": "none", "estimator": "k3", "beta": 0.0},
        "length": [{"name": "overlong_filter"}],
    }
    assert tracking.wandb_tags(cfg, slots) == [
        "dapo",
        "clip.eps_high=0.32",
        "clip=clip_higher",
        "length=overlong_filter",
        "mine",
    ]


def test_unreadable_lines_are_skipped_counted_and_named(tmp_path, caplog):
    from zoo.run.tracking import read_jsonl_counted

    p = tmp_path / "metrics.jsonl"
    p.write_bytes(
        b'{"step": 1, "reward/total": 0.5}\n{"step": 2, "reward/total": 0.6\xff}\n[1, 2]\n\n'
        b'{"step": 3, "reward/total": 0.7}\n{"step": 4, "rew'
    )
    recs, skipped = read_jsonl_counted(p)
    assert [r["step"] for r in recs] == [1, 3] and skipped == 3  # the \xff line, a non-object, the cut line
    with caplog.at_level(logging.WARNING, logger="zoo.run.jsonl"):
        assert [r["step"] for r in read_jsonl(p)] == [1, 3]
    assert f"{p}: skipped 3 unreadable line(s)" in caplog.text
    assert read_jsonl_counted(tmp_path / "missing.jsonl") == ([], 0)


def test_read_json_of_a_non_utf8_file_is_empty(tmp_path):
    from zoo.run.tracking import read_json

    (tmp_path / "summary.json").write_bytes(b'{"status": "finished\xff"}')
    assert read_json(tmp_path / "summary.json") == {}


def test_write_errors_name_the_file_and_leave_no_temporary_file(tmp_path, monkeypatch):
    import builtins
    import errno
    import pathlib

    from zoo.core.faults import WriteError

    tr = Tracker(tmp_path / "run", config={}, wandb_opts=None, name="r")
    for s in range(3):
        tr.log({"reward/total": s / 10}, step=s)

    def full(file, mode="r", *a, **kw):
        if "a" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return builtins.open(file, mode, *a, **kw)

    monkeypatch.setattr(jsonl, "open", full, raising=False)
    with pytest.raises(WriteError, match=rf"^no space left on device while writing {tr.metrics_path}$"):
        tr.log({"reward/total": 0.9}, step=3)
    real = pathlib.Path.write_text

    def half_then_full(self, data, *a, **kw):
        real(self, data[:5], *a, **kw)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", half_then_full)
    assert tr.truncate_after(2) == 0  # nothing to drop: no rewrite, so a full disk does not matter
    with pytest.raises(WriteError, match=rf"^no space left on device while writing {tr.metrics_path}$"):
        tr.truncate_after(1)
    monkeypatch.undo()
    assert sorted(p.name for p in tr.run_dir.iterdir()) == ["metrics.jsonl"]  # no metrics.jsonl.tmp
    assert [r["step"] for r in read_jsonl(tr.metrics_path)] == [0, 1, 2]  # the file itself untouched
