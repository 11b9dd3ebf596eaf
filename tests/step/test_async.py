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


def _cfg(model_dir, out, k=None, workers=2, steps=3, backend="thread", budget=None, **over):
    extra = {"async": {"max_staleness": k, "workers": workers, "backend": backend}} if k is not None else {}
    budget = {"steps": steps, **(budget or {})}
    return tiny_run_config(model_dir, out, eval={"enabled": False}, budget=budget, **extra, **over)


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
    trainer.train(_cfg(tiny_model_dir, tmp_path / "sim", k=0, backend="simulated"), resume=False, progress=False)
    assert k0 == _metrics(tmp_path / "sim")  # nor does sampling inline (the simulated backend)
    assert any(r["optim/grad_norm"] > 0 for r in k0)  # it trained


def test_simulated_staleness_is_exactly_min_step_k_and_deterministic(tiny_model_dir, tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = _cfg(tiny_model_dir, tmp_path / name, k=2, steps=5, backend="simulated")
        trainer.train(cfg, resume=False, progress=False)
        rows = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["async/staleness_max"] for r in rows] == [0, 1, 2, 2, 2]
        assert [r["async/staleness_mean"] for r in rows] == [0, 1, 2, 2, 2]
        runs.append(_metrics(tmp_path / name))
    assert runs[0] == runs[1]


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
    assert ms[0]["async/staleness_max"] == 0.0  # the first step trains version 0's groups
    # the queue fills to k (0, 1, then 2 on an idle machine; a loaded one may take a step longer), never beyond
    assert max(m["async/staleness_max"] for m in ms) == k and sum(m["async/overshoot"] for m in ms) == 0
    # a synchronous step would wait for its 2 groups (2 workers in parallel: the groups' seconds / 2, each
    # >= DELAY) and then train (the step's own seconds without the wait, >= train_s): measured, not assumed,
    # so a busy machine slows both sides alike
    steady = range(k + 1, len(ms))
    sync = [ms[i]["async/generate_s"] / 2 + ms[i]["time/step"] - ms[i]["time/wait_workers"] for i in steady]
    assert min(sync) >= SlowWorker.DELAY + train_s
    assert sum(walls[i] for i in steady) < 0.8 * sum(sync), (walls, sync)


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


def test_with_two_minibatches_the_number_of_workers_changes_nothing(tiny_model_dir, tmp_path, monkeypatch):
    # each worker's model is built with random weights before version 0 loads: drawn from the global RNG,
    # they moved the trainer's minibatch order with the number of workers (seen by a fresh tester)
    two = {"budget": {"updates": {"epochs": 1, "minibatches": 2}}}
    for name, w in (("w1", 1), ("w2", 2)):
        trainer.train(_cfg(tiny_model_dir, tmp_path / name, k=0, workers=w, **two), resume=False, progress=False)
    with monkeypatch.context() as mp:
        _seeded_sync_generate(mp)
        trainer.train(_cfg(tiny_model_dir, tmp_path / "sync", **two), resume=False, progress=False)
    w1 = _metrics(tmp_path / "w1")
    assert w1 == _metrics(tmp_path / "w2") == _metrics(tmp_path / "sync")
    assert all(r["optim/updates"] == 2 for r in w1)  # two minibatches did train


def test_a_resumed_simulated_run_equals_the_uninterrupted_one(tiny_model_dir, tmp_path, monkeypatch):
    def cfg(out):
        return _cfg(tiny_model_dir, out, k=2, steps=5, backend="simulated", checkpoint={"every": 1})

    trainer.train(cfg(tmp_path / "whole"), resume=False, progress=False)
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "4")
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer.train(cfg(tmp_path / "cut"), resume=False, progress=False)
    state = torch.load(tmp_path / "cut" / "checkpoint" / "state.pt", weights_only=True)
    older = state["async"]["versions"]  # the ring's versions before the newest: tensors that differ from it
    assert state["step"] == 4 and sorted(older) == [2, 3] and any(older.values())
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    trainer.train(cfg(tmp_path / "cut"), resume=True, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["async/staleness_max"] for r in rows if "step" in r] == [0, 1, 2, 2, 2]  # not 0, 1 again
    assert _metrics(tmp_path / "cut") == _metrics(tmp_path / "whole")
