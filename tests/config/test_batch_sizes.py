"""Batch sizes (docs/reference/run-file.md "Batch sizes"): `budget.micro_batch` is the rows of a training
forward; generation (`sampling.batch_size`) and evaluation (`eval.batch_size`) have their own keys,
whose defaults keep every shipped study's batches; they are recorded in provenance, left out of the
fingerprint, and a resume that changes them warns."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from conftest import tiny_run_config

from zoo.config.run import RunConfig, batch_sizes, effective_variant, generate_batch_size
from zoo.run.fingerprint import fingerprint
from zoo.run.provenance import batch_size_warnings
from zoo.study.experiment import expand_arms, load_study

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_explicit_keys():
    cfg = RunConfig.model_validate({"budget": {"micro_batch": 64}})
    assert generate_batch_size(cfg, 4) == 32 and generate_batch_size(cfg, 48) == 48  # max(G, 32), not micro_batch
    assert cfg.eval.batch_size == 16
    cfg = RunConfig.model_validate({"sampling": {"batch_size": 8}, "eval": {"batch_size": 3}})
    assert batch_sizes(cfg, 4) == {"sampling.batch_size": 8, "eval.batch_size": 3, "budget.micro_batch": 8}
    with pytest.raises(Exception, match="batch_size"):
        RunConfig.model_validate({"sampling": {"batch_size": 0}})


# recipes written after these keys existed: no earlier numbers of theirs to keep (they set their own batches)
NEWER = {
    "gsm8k_qwen05b.yaml",
    "gsm8k_qwen15b.yaml",
    "quickstart_learning.yaml",
    "learning_curve.yaml",
    "quickstart.yaml",
    "recipe_grid.yaml",
    "recipe_transfer.yaml",
    "clip_higher_entropy.yaml",
    "distill.yaml",
    "vlm_geometry_qwen25vl3b.yaml",
    "staleness.yaml",
    "staleness_lm.yaml",
    "staleness_backends.yaml",
}


def _zoo_tta_file(p: Path) -> bool:  # `zoo tta` studies (experiments/grpo_tta.yaml) have no LM batches
    return "tta" in yaml.safe_load(p.read_text())


@pytest.mark.parametrize(
    "study",
    sorted(p.name for p in (ROOT / "experiments").glob("*.yaml") if p.name not in NEWER and not _zoo_tta_file(p)),
)
def test_every_shipped_study_keeps_the_batches_it_had(study):
    """The rule before these keys: generate max(micro_batch, G, 32), evaluate max(micro_batch, 8).
    A study's numbers stay when its generate calls hold the same rows (a smaller batch only matters
    when the step has more rows than it) and, with evaluation on, its eval calls too."""
    for arm in expand_arms(load_study(ROOT / "experiments" / study)):
        cfg = arm.config
        G = effective_variant(cfg).group_size
        rows = cfg.budget.prompts_per_step * G
        before = max(cfg.budget.micro_batch, G, 32)
        assert min(generate_batch_size(cfg, G), rows) == min(before, rows), arm.label
        if cfg.eval.enabled:
            assert cfg.eval.batch_size == max(cfg.budget.micro_batch, 8), arm.label


def test_generation_batch_sizes_are_not_in_the_fingerprint_but_micro_batch_is():
    base = RunConfig.model_validate({})
    digest = fingerprint(base)[0]
    assert (
        fingerprint(RunConfig.model_validate({"sampling": {"batch_size": 7}, "eval": {"batch_size": 5}}))[0] == digest
    )
    assert fingerprint(RunConfig.model_validate({"budget": {"micro_batch": 4}}))[0] != digest


def test_a_changed_batch_size_is_one_warning_naming_key_and_values():
    old = {"batch_sizes": {"sampling.batch_size": 64, "eval.batch_size": 16, "budget.micro_batch": 8}}
    new = {"batch_sizes": {"sampling.batch_size": 32, "eval.batch_size": 16, "budget.micro_batch": 8}}
    (w,) = batch_size_warnings(old, new)
    assert w.startswith("resuming with sampling.batch_size 32 (the run so far used 64)")
    assert batch_size_warnings(old, old) == []
    assert batch_size_warnings({"seed": 0}, new) == [] and batch_size_warnings(None, new) == []  # no record


def test_the_run_records_its_batch_sizes_and_a_resume_that_changes_one_warns(
    tiny_model_dir, tmp_path, monkeypatch, caplog
):
    from zoo.run.trainer import train

    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "1")
    cfg = tiny_run_config(tiny_model_dir, tmp_path, sampling={"batch_size": 4}, eval={"enabled": False})
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cfg, progress=False)
    rec = yaml.safe_load((tmp_path / "config.yaml").read_text())["provenance"]["batch_sizes"]
    assert rec == {"sampling.batch_size": 4, "eval.batch_size": 16, "budget.micro_batch": 4}
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    resumed = tiny_run_config(tiny_model_dir, tmp_path, sampling={"batch_size": 8}, eval={"enabled": False})
    with caplog.at_level(logging.WARNING, logger="zoo.run.trainer"):
        assert train(resumed, progress=False)["status"] == "finished"  # same fingerprint: it resumes
    assert any("resuming with sampling.batch_size 8 (the run so far used 4)" in r.getMessage() for r in caplog.records)
    rec = yaml.safe_load((tmp_path / "config.yaml").read_text())["provenance"]["batch_sizes"]
    assert rec["sampling.batch_size"] == 8


def test_the_memory_check_names_the_generate_batch_when_it_is_the_knob(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    from zoo.checks import fit as me
    from zoo.config.variant import VariantError

    config = AutoConfig.from_pretrained(tiny_model_dir)
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        sampling={"batch_size": 1_000_000},
        budget={"prompts_per_step": 250_000, "group_size": 4},
    )
    with pytest.raises(VariantError, match=r"lower sampling.batch_size / budget.max_new_tokens$"):
        me.check_rollout_fits(cfg, 4, 1_000_000, config, 40, 4, available=8 * 10**9)
