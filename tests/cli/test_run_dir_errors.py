"""`zoo run --resume DIR` and `zoo export DIR OUT` on a folder that is not a run folder: one line that
says which of the three it is (missing, a file, no config.yaml) and names the path."""

import sys

import pytest
from typer.testing import CliRunner

from zoo.cli import app, main
from zoo.cli.common import RUN_DIR_HOLDS

runner = CliRunner()


def _err(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, " ".join(r.output.split())


def test_resume_a_missing_folder_says_it_does_not_exist(tmp_path):
    d = tmp_path / "runs" / "typo"
    code, text = _err("run", "--resume", str(d))
    assert code == 1 and f"--resume {d}: no such folder" in text and "config.yaml" not in text
    assert not d.exists()  # nothing is created


def test_resume_a_folder_without_config_says_what_a_run_folder_holds(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    code, text = _err("run", "--resume", str(tmp_path))
    assert code == 1 and f"--resume {tmp_path}: the folder exists but has no config.yaml" in text
    assert RUN_DIR_HOLDS in text and "no such folder" not in text


def test_resume_the_config_file_itself_points_at_its_folder(tmp_path):
    f = tmp_path / "config.yaml"
    f.write_text("name: x\n")
    code, text = _err("run", "--resume", str(f))
    assert code == 1 and f"--resume {f}: is a file, not a run folder (its folder: {tmp_path})" in text


def test_export_a_missing_folder_says_it_does_not_exist(tmp_path, monkeypatch, capsys):
    d = tmp_path / "nope"
    monkeypatch.setattr(sys, "argv", ["zoo", "export", str(d), str(tmp_path / "out")])
    with pytest.raises(SystemExit) as e:
        main()
    text = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 1 and f"zoo export {d}: no such folder" in text


def test_export_of_an_unfinished_run_says_which_step_it_exports(tiny_model_dir, tmp_path, monkeypatch, caplog):
    # a run stopped after step 1 of 3 exported silently, as if it were the trained policy
    import logging

    from conftest import tiny_run_config

    from zoo.cli.export import export_run
    from zoo.run import trainer

    cfg = tiny_run_config(tiny_model_dir, tmp_path / "run", budget={"steps": 3}, eval={"enabled": False})
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "1")
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer.train(cfg, progress=False)
    with caplog.at_level(logging.WARNING, logger="zoo.cli.export"):
        export_run(tmp_path / "run", tmp_path / "hf")
    assert "is unfinished: exporting its checkpoint at step 1 of 3" in caplog.text
    assert (tmp_path / "hf" / "config.json").is_file()
