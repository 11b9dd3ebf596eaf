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
