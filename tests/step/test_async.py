"""Asynchronous training (docs/guides/async.md) through the step and the trainer on the tiny model:
k = 0 is the synchronous algorithm, a slow trainer makes the observed staleness reach k while the
step's wall time stays far below generate + train, a failing worker stops the run with one line
naming it, and a resume regenerates the queued groups."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
import torch
from conftest import tiny_run_config

import zoo.step.sample as sample_mod
from zoo.backends.generate.rollout_worker import RolloutWorker
from zoo.run import rollouts, trainer
from zoo.step import pipeline
from zoo.step.hooks import Hooks, Phase
from zoo.step.pacing import Finished, Slot, group_seed
from zoo.step.producer import assemble, published

pytestmark = pytest.mark.e2e
VOLATILE = ("time/", "perf/", "async/", "count/")  # clocks, and keys only the async run logs


def _cfg(model_dir, out, k=None, workers=2, steps=3, **over):
    extra = {"async": {"max_staleness": k, "workers": workers}} if k is not None else {}
    return tiny_run_config(model_dir, out, eval={"enabled": False}, budget={"steps": steps}, **extra, **over)


def _metrics(out):
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows if "step" in r]


def _seeded_sync_generate(monkeypatch):
    """The synchronous step, its generate replaced by the workers' per-group seeded draws from the
    trainer's current weights: what async with k = 0 must reproduce number for number."""
    w = {}

    def generate(st, rows, group_offset):
        if w.get("v") != st.step:
            w["worker"] = w.get("worker") or RolloutWorker(st.models.policy.config, st.models.tokenizer)
            w["worker"].version = -1
            w["worker"].accept(published(st.models.policy, st.step))
            w["v"] = st.step
        sp = rollouts._sampling(st)
        out = []
        for g, row in enumerate(rows):
            slot = Slot(st.step, g, group_seed(st.cfg.seed, st.step, g), row)
            out.append(
                Finished(slot, st.step, w["worker"].generate(row["prompt"], st.variant.group_size, sp, slot.seed))
            )
        return assemble(out, int(st.models.tokenizer.pad_token_id))

    monkeypatch.setattr(sample_mod, "generate", generate)
    monkeypatch.setattr(pipeline, "generate", generate)


def test_k0_gives_the_synchronous_runs_metrics(tiny_model_dir, tmp_path, monkeypatch):
    trainer.train(_cfg(tiny_model_dir, tmp_path / "k0", k=0), resume=False, progress=False)
    trainer.train(_cfg(tiny_model_dir, tmp_path / "k0w1", k=0, workers=1), resume=False, progress=False)
    with monkeypatch.context() as mp:
        _seeded_sync_generate(mp)
        trainer.train(_cfg(tiny_model_dir, tmp_path / "sync"), resume=False, progress=False)
    k0, sync = _metrics(tmp_path / "k0"), _metrics(tmp_path / "sync")
    assert len(k0) == 3 and k0 == sync
    assert k0 == _metrics(tmp_path / "k0w1")  # the number of workers changes nothing at k = 0
    assert any(r["optim/grad_norm"] > 0 for r in k0)  # it trained


class SlowTrainer(Hooks):
    """Sleeps `seconds` in the train phase: a trainer slower than the workers."""

    def __init__(self, seconds):
        self.seconds = seconds

    @contextlib.contextmanager
    def phase(self, name):
        yield Phase(name)
        if name == "train":
            time.sleep(self.seconds)


class SlowWorker(RolloutWorker):
    """A worker that takes `DELAY` more seconds per group."""

    DELAY = 0.4

    def generate(self, *a, **kw):
        time.sleep(self.DELAY)
        return super().generate(*a, **kw)


def test_a_slow_trainer_reaches_staleness_k_and_overlaps_generation(tiny_model_dir, tmp_path, monkeypatch):
    k, train_s = 2, 0.4
    monkeypatch.setattr(rollouts, "RolloutWorker", SlowWorker, raising=False)
    monkeypatch.setattr("zoo.backends.generate.rollout_worker.RolloutWorker", SlowWorker)
    st = trainer.setup(_cfg(tiny_model_dir, tmp_path, k=k, steps=7))
    rollouts.open_rollouts(st)
    ms, walls = [], []
    try:
        for _ in range(7):
            t0 = time.perf_counter()
            ms.append(pipeline.step(st, hooks=SlowTrainer(train_s)).metrics)
            walls.append(time.perf_counter() - t0)
    finally:
        rollouts.close_rollouts(st)
    assert [m["async/staleness_max"] for m in ms[:3]] == [0.0, 1.0, 2.0]  # the queue fills: 0, 1, then k
    assert max(m["async/staleness_max"] for m in ms) == k and sum(m["async/overshoot"] for m in ms) == 0
    # a synchronous step waits for its 2 groups (2 workers in parallel: >= DELAY) and then trains (>= train_s)
    steady = walls[k + 1 :]
    assert sum(steady) / len(steady) < 0.75 * (SlowWorker.DELAY + train_s), walls
    assert all(m["time/wait_workers"] < 0.1 for m in ms[k + 1 :]), [m["time/wait_workers"] for m in ms]


def test_a_failing_worker_stops_the_step_with_one_line_naming_it(tiny_model_dir, tmp_path, monkeypatch):
    def boom(self, *a, **kw):
        raise ValueError("boom")

    monkeypatch.setattr(RolloutWorker, "generate", boom)
    st = trainer.setup(_cfg(tiny_model_dir, tmp_path, k=1, workers=1))
    rollouts.open_rollouts(st)
    try:
        with pytest.raises(RuntimeError, match=r"^rollout worker 0 failed: ValueError: boom$"):
            pipeline.step(st)
    finally:
        rollouts.close_rollouts(st)
    assert st.step == 0  # nothing trained


def test_the_checkpoint_keeps_the_queue_and_a_resume_regenerates_it(tiny_model_dir, tmp_path, monkeypatch):
    cfg = _cfg(tiny_model_dir, tmp_path, k=1, steps=3)
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "2")
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer.train(cfg, resume=False, progress=False)
    state = torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=True)
    queue = state["async"]
    assert queue["stream"]["index"] == 4  # before step 2's rows: 2 steps x 2 prompts
    assert all(s >= 2 for s, _, _ in queue["pending"])
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    summary = trainer.train(cfg, resume=True, progress=False)
    assert summary["status"] == "finished"
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 3 and last["async/regenerated"] == len(queue["pending"])
