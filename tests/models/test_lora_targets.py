"""zoo/models/lora_targets.py: a LoRA `target_modules` entry that names no module is refused (peft trains
without it when another entry matches), by `apply_lora`, `zoo validate` and `zoo run` alike."""

from __future__ import annotations

import pytest
from conftest import tiny_run_config

from zoo.models.lora_targets import adaptable_names, unmatched_targets
from zoo.models.policy import apply_lora
from zoo.models.tiny import tiny_model_and_tokenizer


def test_a_misspelt_target_is_named_with_its_close_match():
    model, _ = tiny_model_and_tokenizer(seed=0)
    assert unmatched_targets(model, ["q_proj", "v_proj", "self_attn.o_proj", "all-linear"]) == []
    errs = unmatched_targets(model, ["q_projj", "v_proj"])
    assert len(errs) == 1 and "'q_projj' names no module of the model (did you mean 'q_proj'?)" in errs[0]
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= set(adaptable_names(model))
    assert "input_layernorm" not in adaptable_names(model)  # no weight LoRA adapts


def test_apply_lora_refuses_a_partial_match_peft_would_accept():
    model, _ = tiny_model_and_tokenizer(seed=0)
    with pytest.raises(ValueError, match="'q_projj' names no module of the model"):
        apply_lora(model, {"r": 2, "target_modules": ["q_projj", "v_proj"]})
    wrapped = apply_lora(model, {"r": 2, "target_modules": ["q_proj", "v_proj"]})
    assert unmatched_targets(wrapped, ["q_proj", "v_proj"]) == []  # a peft model's names still match
    assert "lora_A" not in adaptable_names(wrapped) and "base_layer" not in adaptable_names(wrapped)


def test_validate_and_run_refuse_it_alike(tiny_model_dir, tmp_path):
    from zoo import checks
    from zoo.checks.pipeline import check_loadable
    from zoo.run import trainer

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        model_opts={"autocast": "none", "lora": {"r": 2, "alpha": 4, "target_modules": ["q_projj", "v_proj"]}},
    )
    rep = check_loadable(cfg, checks.before_load(cfg)[1])
    assert any("'q_projj' names no module of the model (did you mean 'q_proj'?)" in e for e in rep.errors), rep
    with pytest.raises(ValueError, match="'q_projj' names no module of the model"):
        trainer.setup(cfg)
