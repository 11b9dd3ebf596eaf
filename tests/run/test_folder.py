"""zoo.run.folder.RunFolder without a model: reuse or a fresh start, the resume, config.yaml and the
records it writes. Whole runs through it: tests/run/test_trainer.py and test_fingerprint.py."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import yaml

from zoo.backends.train import checkpoint as ckpt
from zoo.config.run import RunConfig, effective_variant
from zoo.core import dist
from zoo.core.faults import WriteError
from zoo.core.guards import GuardState
from zoo.run import fingerprint as fp
from zoo.run import folder as folder_mod
from zoo.run.folder import RunFolder
from zoo.run.jsonl import append_jsonl


def _cfg(tmp_path, **over) -> RunConfig:
    return RunConfig.model_validate(
        {
            "variant": "grpo",
            "model": "m",
            "tracking": {"wandb": False},
            "output_dir": str(tmp_path / "r"),
            "budget": {"steps": 4},
            **over,
        }
    )


def _folder(tmp_path) -> RunFolder:
    folder = RunFolder(_cfg(tmp_path))
    folder.make()
    return folder


def _record(folder: RunFolder, summary: dict) -> None:
    """The folder as a run of its config left it: fingerprint.json, summary.json and a checkpoint."""
    fp.write_record(folder.out, folder.cfg)
    (folder.out / "summary.json").write_text(json.dumps(summary))
    ckpt.save(folder.out / "checkpoint", {"step": 2})


def _raised(folder: RunFolder, e: BaseException, step: int) -> BaseException:
    try:
        raise e
    except BaseException as caught:  # noqa: BLE001 - record_failure is called inside `except`
        return folder.record_failure(caught, SimpleNamespace(step=step, guard=GuardState()))


# --------------------------------------------------------------------------- reuse or a fresh start


def test_a_finished_run_is_returned_and_an_unfinished_one_trains_on(tmp_path, caplog):
    folder = _folder(tmp_path)
    _record(folder, {"status": "finished", "steps": 4})
    with caplog.at_level(logging.WARNING, logger="zoo.run.trainer"):
        assert folder.claim(True, None) == {"status": "finished", "steps": 4}
    assert f"{folder.out} already finished 4 steps; nothing to do (use --fresh to train again)" in caplog.text
    # failed, interrupted, or a summary that says finished short of budget.steps: resumed, its results kept
    for summary in ({"status": "failed", "steps": 2}, {"status": "interrupted"}, {"status": "finished", "steps": 3}):
        _record(folder, summary)
        assert folder.claim(True, None) is None
        assert (folder.out / "summary.json").exists() and (folder.out / "checkpoint" / ckpt.FILE).exists()


def test_fresh_deletes_a_finished_runs_results_and_trains(tmp_path):
    folder = _folder(tmp_path)
    _record(folder, {"status": "finished", "steps": 4})
    assert folder.claim(False, None) is None
    assert not any((folder.out / n).exists() for n in ("summary.json", fp.RECORD, "checkpoint"))


def test_a_run_folder_under_runs_that_cannot_be_made_names_the_name_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("a file where the runs/ folder goes")
    cfg = RunConfig.model_validate({"variant": "grpo", "model": "m", "name": "exp"})
    with pytest.raises(
        WriteError, match=r"cannot create the run folder runs/exp \(.+\): name 'exp' \(runs/<name>\) must name a folder"
    ):
        RunFolder(cfg).make()


# --------------------------------------------------------------------------- resume and config.yaml


def test_resume_restores_the_saved_step_and_a_fresh_start_clears_the_checkpoint(tmp_path, monkeypatch, caplog):
    folder = _folder(tmp_path)
    _record(folder, {"status": "failed", "steps": 3})
    append_jsonl(folder.out / "metrics.jsonl", [{"step": s, "reward/total": 0.5} for s in (1, 2, 3)])
    restored = []

    def restore(st, state, directory):
        restored.append(directory)
        st.step = state["step"]

    monkeypatch.setattr(folder_mod, "restore_checkpoint", restore)
    st = SimpleNamespace(step=0, provenance={})
    with caplog.at_level(logging.WARNING, logger="zoo.run.trainer"):
        assert folder.restore(st, resume=True) == {"step": 2}
    assert st.step == folder.saved_step == 2 and restored == [folder.out / "checkpoint"]
    assert f"resuming {folder.out} from its checkpoint at step 2 of 4" in caplog.text
    fresh = SimpleNamespace(step=0, provenance={})
    assert folder.restore(fresh, resume=False) is None
    assert fresh.step == 0 and folder.saved_step is None and not (folder.out / "checkpoint" / ckpt.FILE).exists()


def test_a_resumed_summary_keeps_only_the_first_evaluation(tmp_path):
    folder = _folder(tmp_path)
    old = {"eval/before": {"eval/n": 2.0}, "status": "failed", "error": "RuntimeError: x", "reward/total": 0.1}
    (folder.out / "summary.json").write_text(json.dumps(old))
    st = SimpleNamespace(cfg=folder.cfg, variant=effective_variant(folder.cfg), provenance={"seed": 0})
    rcfg = folder.write_config(st, resumed=True)
    digest, fields = fp.fingerprint(folder.cfg)
    assert folder.summary == {"eval/before": {"eval/n": 2.0}, "fingerprint": digest, "fingerprint_fields": fields}
    assert rcfg["fingerprint"]["digest"] == digest == json.loads((folder.out / fp.RECORD).read_text())["digest"]
    written = yaml.safe_load((folder.out / "config.yaml").read_text())
    assert written["resolved_variant"]["name"] == "grpo" and written["provenance"] == {"seed": 0}
    folder.write_config(st, resumed=False)
    assert "eval/before" not in folder.summary


def test_the_last_steps_metrics_are_its_training_record(tmp_path):
    folder = _folder(tmp_path)
    recs = [{"step": 1, "reward/total": 0.1}, {"step": 2, "reward/total": 0.2}, {"step": 2, "eval/greedy_acc": 0.5}]
    append_jsonl(folder.out / "metrics.jsonl", recs)
    assert folder.last_step_metrics(2) == {"reward/total": 0.2}
    assert folder.last_step_metrics(3) == {}


# --------------------------------------------------------------------------- the failure record


def test_a_failure_is_recorded_with_its_error_traceback_and_what_the_summary_held(tmp_path):
    folder = _folder(tmp_path)
    folder.summary, folder.config = {"eval/before": {"eval/n": 2.0}}, {"variant": "grpo"}
    e = RuntimeError("boom")
    assert _raised(folder, e, step=3) is e
    s = json.loads((folder.out / "summary.json").read_text())
    assert (s["status"], s["error"], s["steps"], s["config"]) == (
        "failed",
        "RuntimeError: boom",
        3,
        {"variant": "grpo"},
    )
    assert "raise e" in s["traceback"] and "RuntimeError: boom" in s["traceback"]
    assert s["eval/before"] == {"eval/n": 2.0} and GuardState().totals().items() <= s.items()


def test_only_rank_0_writes_the_folder(tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    _record(folder, {"status": "failed", "steps": 2})
    before = (folder.out / "summary.json").read_text()
    monkeypatch.setattr(dist, "rank", lambda: 1)
    assert folder.claim(False, None) is None  # --fresh: rank 0 deletes the old results, not this rank
    _raised(folder, RuntimeError("boom"), step=1)
    assert (folder.out / "summary.json").read_text() == before and (folder.out / "checkpoint" / ckpt.FILE).exists()
