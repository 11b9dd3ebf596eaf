"""A run closes its generator when it ends (finished or failed), so an engine-holding backend (vllm:
about 1 GB each) does not pile up over the arms of a study run in one process."""

import pytest

import zoo.run.setup as run_setup
import zoo.run.trainer as trainer
from tests.conftest import tiny_run_config
from zoo.backends.generate.hf_generator import HFGenerator
from zoo.run.folder import RunFolder


class _Closing(HFGenerator):
    closed = 0

    def close(self):
        type(self).closed += 1


@pytest.mark.parametrize("fail", [False, True])
def test_the_run_closes_its_generator(tmp_path, tiny_model_dir, monkeypatch, fail):
    _Closing.closed = 0
    monkeypatch.setattr(run_setup, "build_generator", lambda spec, policy, tok: _Closing(policy, tok))
    cfg = tiny_run_config(tiny_model_dir, tmp_path / "out", budget={"steps": 1}, eval={"enabled": False})
    if fail:
        monkeypatch.setattr(RunFolder, "write_summary", _boom_once(RunFolder.write_summary))
        with pytest.raises(RuntimeError, match="boom"):
            trainer.train(cfg, progress=False)
    else:
        assert trainer.train(cfg, progress=False)["status"] == "finished"
    assert _Closing.closed == 1


def _boom_once(real):
    calls = []

    def write(folder, summary):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return real(folder, summary)

    return write


def test_close_generator_leaves_a_generator_without_close_alone():
    trainer.close_generator(None)
    trainer.close_generator(object())


def test_a_run_folder_that_cannot_be_made_names_the_key(tmp_path, tiny_model_dir):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cfg = tiny_run_config(tiny_model_dir, blocker / "out")
    with pytest.raises(
        OSError, match=r"cannot create the run folder .*file/out .*output_dir '.*file/out' must name a folder"
    ):
        trainer.train(cfg, progress=False)
