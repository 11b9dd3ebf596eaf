"""Asynchronous training with its rollout workers as Ray actors (`async.backend: ray`,
zoo/backends/generate/ray_worker.py): 2 local workers, each its own process, on the tiny model."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_run_config

pytestmark = [pytest.mark.ray, pytest.mark.e2e]
ray = pytest.importorskip("ray")


def test_two_ray_workers_train_within_the_bound(tiny_model_dir, tmp_path):
    from zoo.run import trainer

    k = 1
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        eval={"enabled": False},
        budget={"steps": 3},
        **{"async": {"max_staleness": k, "workers": 2, "backend": "ray"}},
    )
    try:
        summary = trainer.train(cfg, resume=False, progress=False)
    finally:
        ray.shutdown()
    assert summary["status"] == "finished"
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "async/staleness_max" in r]
    assert len(steps) == 3 and all(r["async/staleness_max"] <= k for r in steps)
    assert steps[0]["async/staleness_max"] == 0  # step 0's groups can only be sampled with version 0
    # the actors' start (a process each, the model built, version 0 loaded) is timed before the first step
    # and logged with it once, not inside that step's wait for its groups
    assert "async/startup_s" in steps[0] and not any("async/startup_s" in r for r in steps[1:])
    assert steps[0]["async/startup_s"] > steps[0]["time/wait_workers"]
