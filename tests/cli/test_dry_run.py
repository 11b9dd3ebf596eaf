"""`zoo ablate STUDY --dry-run` writes nothing; `--write-configs` writes each arm's config.yaml and
prints the command that runs it; the help says both."""

from pathlib import Path

from typer.testing import CliRunner

from zoo.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
QUICKSTART = str(ROOT / "experiments/quickstart.yaml")


def test_dry_run_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["ablate", QUICKSTART, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert list(tmp_path.iterdir()) == []
    text = " ".join(r.stdout.split())
    assert "grpo-s0" in text and "dry run: nothing written; add --write-configs" in text


def test_write_configs_writes_one_runnable_config_per_arm(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["ablate", QUICKSTART, "--dry-run", "--write-configs", "--set", "variants=[grpo, dapo]"])
    assert r.exit_code == 0, r.output
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["runs/quickstart/dapo-s0/config.yaml", "runs/quickstart/grpo-s0/config.yaml"]
    cmds = [x for x in r.stdout.splitlines() if x.startswith("zoo run ")]
    assert cmds == [f"zoo run {w}" for w in written]


def test_write_configs_without_dry_run_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["ablate", QUICKSTART, "--write-configs"])
    assert r.exit_code == 1 and "--write-configs goes with --dry-run" in " ".join(r.output.split())
    assert list(tmp_path.iterdir()) == []


def test_help_says_what_the_dry_run_writes():
    r = runner.invoke(app, ["ablate", "--help"], env={"COLUMNS": "300"})
    text = " ".join(r.output.replace("│", " ").split())
    assert "run nothing, write nothing" in text
    assert "write each arm's resolved config to <output_dir>/<arm>/config.yaml" in text


def test_a_study_refused_by_its_arms_checks_names_its_file(tmp_path):
    study = tmp_path / "bad_study.yaml"
    study.write_text(
        "name: bad\nbudget: {steps: 1, prompts_per_step: 2, max_new_tokens: 8, group_size: 4}\n"
        "tracking: {wandb: false}\nvariants: [grpo]\nset: {clp: ppo}\n"  # an arm check that names no file
        f"output_dir: {tmp_path / 'runs'}\n"
    )
    r = runner.invoke(app, ["ablate", str(study), "--dry-run"])
    text = " ".join(r.output.split())
    assert r.exit_code != 0 and f"{study}: refused" in text and "key 'clp' is neither a variant slot/field" in text
    study.write_text(study.read_text().replace("variants: [grpo]\nset: {clp: ppo}", "variants: [grpoo]"))
    r = runner.invoke(app, ["ablate", str(study), "--dry-run"])  # an error that names the file: said once
    text = " ".join(r.output.split())
    assert r.exit_code != 0 and f"{study}: key 'variants[0]': variant 'grpoo' not found" in text
    assert f"{study}: refused" not in text
