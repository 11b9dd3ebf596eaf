"""A damaged metrics.jsonl is never reported with another step's numbers (issue 37 §4): a run whose
record of its checkpoint's step was cut is refused on resume, saying so; damage past the checkpoint is
truncated away and the run resumes."""

import json

import pytest
from conftest import tiny_run_config

from zoo.backends.train.checkpoint import CheckpointError
from zoo.run.jsonl import missing_step_record


def _lines(path):
    return path.read_text().splitlines(keepends=True)


def test_missing_step_record_names_the_file_and_step(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1, "reward/total": 0.5}\n{"step": 2, "reward/to')
    msg = missing_step_record(p, 2)
    assert msg.startswith(f"{p}: no intact record of step 2, the step the run's checkpoint holds (1 damaged line(s)")
    assert "another step's numbers" in msg and "--fresh" in msg
    assert missing_step_record(p, 1) is None and missing_step_record(tmp_path / "none.jsonl", 2) is None


@pytest.mark.e2e
def test_a_run_cut_in_its_last_steps_record_is_refused_on_resume(tiny_model_dir, tmp_path):
    from zoo.run.trainer import train

    out = tmp_path / "r"
    cfg = tiny_run_config(tiny_model_dir, out, eval={"enabled": False})
    train(cfg)
    metrics = out / "metrics.jsonl"
    lines = _lines(metrics)
    last = max(i for i, x in enumerate(lines) if json.loads(x).get("step") == 2 and "reward/total" in x)
    metrics.write_text("".join(lines[:last]) + lines[last][:20])  # cut mid-line, as a crash would
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    with pytest.raises(CheckpointError, match="no intact record of step 2, the step the run's checkpoint holds"):
        train(cfg, resume=True)
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"  # nothing rewritten
