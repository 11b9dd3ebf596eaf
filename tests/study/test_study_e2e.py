"""A tiny-model study end to end with the real trainer: arms, W&B offline files, report.md and PNGs
holding the arms' own numbers; and a study killed mid-way that a re-run completes without redoing
finished arms."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from zoo.study import experiment, runner

pytestmark = pytest.mark.e2e  # whole studies through the CLI and the real trainer

ROOT = Path(__file__).resolve().parents[2]


def _study(tmp_path, model_dir, variants, steps=2, wandb=True):
    data = {
        "name": "tiny-study",
        "model": str(model_dir),
        "task": {
            "name": "reasoning_gym",
            "dataset": "basic_arithmetic",
            "size": 16,
            "eval_size": 2,
            "fewshot": 0,
            "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        },
        "rewards": ["correctness", {"name": "length", "scale": 10.0}],
        "budget": {
            "steps": steps,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_new_tokens": 6,
            "micro_batch": 4,
            "updates": {"epochs": 1, "minibatches": 2},
        },
        "optim": {"lr": 1e-3},
        "eval": {"size": 2, "samples": 1},
        "seeds": [0],
        "variants": variants,
        "tracking": {"wandb": {"project": "zoo-test", "mode": "offline"} if wandb else False},
        "output_dir": str(tmp_path / "runs" / "tiny-study"),
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_tiny_study_end_to_end(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    path = _study(tmp_path, tiny_model_dir, ["grpo", "dr_grpo"])
    code = runner.run_study(experiment.load_study(path), console=Console(file=open(os.devnull, "w")))
    assert code == 0
    root = tmp_path / "runs" / "tiny-study"
    index = json.loads((root / "study.json").read_text())
    assert sorted(a["label"] for a in index["arms"]) == ["dr_grpo-s0", "grpo-s0"]
    md = (root / "report.md").read_text()
    assert "## Signal per group" in md and "| correct signal (mean) |" in md  # the tiny model answers nothing right
    for arm in ("grpo-s0", "dr_grpo-s0"):
        d = root / arm
        s = json.loads((d / "summary.json").read_text())
        assert s["status"] == "finished" and s["steps"] == 2
        recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in recs if "reward/total" in r] == [1, 2]
        assert list((d / "wandb").glob("offline-run-*/run-*.wandb")), "W&B offline files missing"
        assert f"{s['reward/total']:.3f}" in md  # the table shows this arm's final reward
    pngs = list((root / "plots").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000 for p in pngs)


def test_killed_study_resumes_without_redoing_finished_arms(tmp_path, tiny_model_dir):
    path = _study(tmp_path, tiny_model_dir, ["grpo", "dr_grpo"], steps=3, wandb=False)
    root = tmp_path / "runs" / "tiny-study"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", "from zoo.cli import main; main()", "ablate", str(path), "--threads", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    first = root / "dr_grpo-s0" / "summary.json"  # arms run in label order: dr_grpo-s0 first
    deadline = time.time() + 120
    while time.time() < deadline and not (first.exists() and json.loads(first.read_text()).get("status") == "finished"):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 while the second arm runs (or just starts)
    proc.wait()
    assert json.loads(first.read_text())["status"] == "finished"
    stamp = first.stat().st_mtime_ns
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert first.stat().st_mtime_ns == stamp  # the finished arm was skipped, not redone
    s2 = json.loads((root / "grpo-s0" / "summary.json").read_text())
    assert s2["status"] == "finished" and s2["steps"] == 3
    assert (root / "report.md").exists()


@pytest.fixture(autouse=True)
def _no_wandb_network(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
