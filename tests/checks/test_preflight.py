"""Checks before the first rollout (zoo.checks.fit: the context length, the memory estimate) and model load errors
on the tiny model: each must fail before anything large is allocated."""

import pytest
from conftest import tiny_run_config

from zoo.checks import fit as me
from zoo.config.variant import VariantError


def test_rollout_memory_by_hand():
    # N = 2 x 4 = 8 rows of 10 + 6 = 16 tokens; one generate call of 8 rows
    est = me.rollout_memory(
        prompts_per_step=2,
        group_size=4,
        micro_batch=4,
        generate_rows=8,
        prompt_tokens=10,
        max_new_tokens=6,
        layers=2,
        kv_heads=2,
        head_dim=8,
        vocab=100,
        kv_bytes=4,
    )
    assert est["token_rows"] == 3 * 8 * 16 * 8
    assert est["kv_cache"] == 2 * 2 * 2 * 8 * 16 * 8 * 4
    assert est["logits"] == max(3 * 8 * 100 * 4, 2 * 4 * 16 * 100 * 4)  # the update's logits: 51200
    assert est["total"] == est["token_rows"] + est["kv_cache"] + est["logits"]


def test_model_shape_falls_back_to_heads_for_kv_heads():
    from types import SimpleNamespace

    cfg = SimpleNamespace(num_hidden_layers=3, num_attention_heads=4, hidden_size=64, vocab_size=10)
    assert me.model_shape(cfg) == {"layers": 3, "kv_heads": 4, "head_dim": 16, "vocab": 10}


def test_check_rollout_fits_names_the_largest_knob(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model_dir)
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"group_size": 1_000_000, "prompts_per_step": 8})
    with pytest.raises(VariantError) as e:
        me.check_rollout_fits(cfg, 1_000_000, 1_000_000, config, 40, 4, available=8 * 10**9)
    msg = str(e.value)
    sh = me.model_shape(config)
    kv = 2 * sh["layers"] * sh["kv_heads"] * sh["head_dim"] * 48 * 1_000_000 * 4  # one generate call of 1e6 rows
    assert msg.startswith("budget: 8 prompts x group_size 1000000 = 8000000 completions of up to 40 + 8 tokens")
    # largest first: the KV cache, then the token rows (3 x 8e6 rows x 48 tokens x 8 bytes = 9.2 GB)
    assert f"(KV cache {kv / 1e9:.1f} GB, token rows 9.2 GB, " in msg and kv > 9.2e9
    assert "more than the 8.0 GB available: lower budget.group_size / budget.max_new_tokens" in msg
    ok = me.check_rollout_fits(
        cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"group_size": 4})}),
        4,
        32,
        config,
        40,
        4,
        available=64 * 10**9,
    )
    assert ok["total"] < 64 * 10**9


def test_group_size_of_a_million_stops_before_the_rollout(tiny_model_dir, tmp_path, monkeypatch):
    from zoo.backends.generate import hf as rollout
    from zoo.backends.generate import hf_generator as sample
    from zoo.run import trainer

    def no_rollout(*a, **kw):
        raise AssertionError("the rollout must not start")

    monkeypatch.setattr(rollout, "generate_rollout", no_rollout)
    monkeypatch.setattr(sample, "generate_rollout", no_rollout)
    # the tiny model's rollout needs ~10 GB at this size (SmolLM2's: terabytes); say the machine has 8
    monkeypatch.setattr("zoo.run.setup.available_memory", lambda device: 8 * 10**9)
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"group_size": 1_000_000, "prompts_per_step": 8})
    with pytest.raises(VariantError, match="group_size 1000000 .* lower budget.group_size"):
        trainer.setup(cfg)


def test_max_new_tokens_beyond_the_context_is_an_error(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    from zoo.run import trainer

    limit = AutoConfig.from_pretrained(tiny_model_dir).max_position_embeddings
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"max_new_tokens": limit})
    with pytest.raises(
        VariantError,
        match=f"budget.max_new_tokens {limit} >= the model's context \\(max_position_embeddings {limit}\\)",
    ):
        trainer.setup(cfg)


def test_long_prompts_beyond_the_context_are_an_error(tiny_model_dir):
    from types import SimpleNamespace

    from zoo.checks.fit import check_context, longest_prompt_tokens
    from zoo.models.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    rows = [{"prompt": "ab"}, {"prompt": "abcdefgh"}, {"prompt": "abc"}]
    n = longest_prompt_tokens(tok, rows)
    assert n == len(tok("abcdefgh")["input_ids"])  # the longest row, with the tokenizer's special tokens
    config = SimpleNamespace(max_position_embeddings=n + 4)
    check_context(config, n, 4)  # exactly the context: fine
    with pytest.raises(VariantError, match=f"longest prompt \\({n} tokens\\) \\+ budget.max_new_tokens 5"):
        check_context(config, n, 5)


def test_a_hub_id_while_offline_is_one_line_saying_what_to_do(monkeypatch):
    from zoo.models import EMBEDDED_MODEL, load_policy

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as e:
        load_policy("no-such-org/no-such-model")
    msg = str(e.value)
    assert "\n" not in msg and not isinstance(e.value, OSError)
    assert "HF_HUB_OFFLINE is set" in msg and "local model directory" in msg and EMBEDDED_MODEL in msg


def test_a_directory_without_a_model_is_one_line(tmp_path):
    from zoo.models import load_policy

    (tmp_path / "model.safetensors").write_text("not weights")  # no config.json, no tokenizer
    with pytest.raises(ValueError, match="transformers could not load it: .* needs config.json") as e:
        load_policy(str(tmp_path))
    assert not isinstance(e.value, OSError) and "\n" not in str(e.value)


def test_ref_reset_every_without_kl_and_a_shadowed_group_size_warn(tiny_model_dir, tmp_path):
    from zoo.run.trainer import validate_run

    cfg = tiny_run_config(tiny_model_dir, tmp_path, ref_reset_every=2, set={"group_size": 3, "kl": "none"})
    _, warnings = validate_run(cfg)
    text = " | ".join(warnings)
    assert "ref_reset_every = 2 has no effect: variant 'grpo' has kl: none" in text
    assert "set.group_size = 3 is ignored: budget.group_size = 4 wins" in text
    _, warnings = validate_run(
        tiny_run_config(tiny_model_dir, tmp_path, set={"group_size": 3}, budget={"group_size": None})
    )
    assert not any("ignored" in w for w in warnings)
    _, warnings = validate_run(tiny_run_config(tiny_model_dir, tmp_path, ref_reset_every=2))  # grpo keeps its KL
    assert not any("ref_reset_every" in w for w in warnings)


def test_a_critic_warmup_as_long_as_the_run_warns(tiny_model_dir, tmp_path):
    # 2 steps with a 2-step warm-up: the policy never moves; 1 step of warm-up leaves one policy step
    from zoo.run.trainer import validate_run

    _, warnings = validate_run(tiny_run_config(tiny_model_dir, tmp_path, variant="ppo", budget={"critic_warmup": 2}))
    assert any("critic_warmup = 2 >= budget.steps = 2: only the critic trains" in w for w in warnings), warnings
    _, warnings = validate_run(tiny_run_config(tiny_model_dir, tmp_path, variant="ppo", budget={"critic_warmup": 1}))
    assert not any("critic_warmup" in w for w in warnings)
