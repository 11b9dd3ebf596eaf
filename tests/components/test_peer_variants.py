"""The named variants added with the peers' mechanisms validate and train 2 steps on the tiny model
(two minibatches, so the ratio leaves 1), and `zoo validate` says what each single-update clip keeps."""

import math

import pytest
import torch

from zoo.checks.variant import check_variant
from zoo.config.variant import load_variant

NEW_VARIANTS = ["lite_ppo", "gpg", "grpo_bypass", "reinforce_bypass_icepop", "luspo", "maxrl"]


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_each_new_variant_validates_with_sources(variant):
    v = load_variant(variant)
    rep = check_variant(v)
    assert rep.ok, rep.errors
    assert v.sources, variant


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_each_new_variant_trains_two_steps(variant, tiny_model_dir, tmp_path):
    from conftest import tiny_run_config

    from zoo.run.trainer import train

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / variant,
        variant=variant,
        budget={"updates": {"epochs": 1, "minibatches": 2}},
        eval={"enabled": False},
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert math.isfinite(summary["loss/policy"])
    state = torch.load(tmp_path / variant / "checkpoint" / "state.pt", map_location="cpu", weights_only=False)
    assert all(torch.isfinite(t).all() for t in state["policy"].values() if t.is_floating_point())


@pytest.mark.parametrize(
    "correction",
    [
        {"name": "m2po", "tau": 0.04},
        {"name": "tis_normalized", "C": 2.0},
        {"name": "rs_divergence", "threshold": 2.0, "statistic": "k3", "level": "max"},
        {"name": "icepop"},
    ],
)
def test_each_new_correction_trains_two_steps(correction, tiny_model_dir, tmp_path):
    """The step-selecting corrections (m2po, tis_normalized) get the step view in a real update."""
    from conftest import tiny_run_config

    from zoo.run.trainer import train

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / correction["name"],
        variant="grpo",
        budget={"updates": {"epochs": 1, "minibatches": 2}},
        eval={"enabled": False},
        set={"correction": [correction], "kl": "none"},
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 2 and math.isfinite(summary["loss/policy"])
