"""zoo.models.cast_cache: the frozen-weight bf16 cast kept across forwards gives autocast's own values."""

import copy

import torch

from zoo.models import apply_lora, cache_frozen_casts
from zoo.models.cast_cache import FrozenCastLinear
from zoo.models.tiny import tiny_model_and_tokenizer

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def _pair():
    model, _ = tiny_model_and_tokenizer(seed=3, hidden=64, layers=2)
    plain = apply_lora(model, LORA)
    with torch.no_grad():  # non-zero B, so the adapters matter
        for n, p in plain.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(n)))
    cached = copy.deepcopy(plain)
    assert cache_frozen_casts(cached) > 0
    return plain, cached


def _loss(model, ids):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits  # [B, L, V]
    return logits.float().log_softmax(-1).mean(), logits


def test_lora_forward_and_grads_are_bit_identical_under_bf16_autocast():
    plain, cached = _pair()
    ids = torch.randint(3, 100, (3, 11), generator=torch.Generator().manual_seed(0))
    for _ in range(2):  # the second pass reads the cached copies
        lp, logits_p = _loss(plain, ids)
        lc, logits_c = _loss(cached, ids)
        assert torch.equal(logits_p, logits_c)
        lp.backward()
        lc.backward()
    gp = {n: p.grad for n, p in plain.named_parameters() if p.requires_grad}
    gc = {n: p.grad for n, p in cached.named_parameters() if p.requires_grad}
    assert gp.keys() == gc.keys() and len(gp) == 8  # 2 layers x (q, v) x (A, B)
    for n in gp:
        assert torch.equal(gp[n], gc[n]), n


def test_copy_is_made_once_and_rebuilt_when_the_weight_changes():
    plain, cached = _pair()
    ids = torch.randint(3, 100, (2, 7), generator=torch.Generator().manual_seed(1))
    layer = cached.base_model.model.model.layers[0].mlp.up_proj  # frozen base Linear, no adapter
    assert isinstance(layer, FrozenCastLinear) and not layer.weight.requires_grad
    with torch.no_grad():
        _loss(cached, ids)
        first = layer._cast
        assert first is not None and first.dtype == torch.bfloat16
        _loss(cached, ids)
        assert layer._cast is first  # reused, not recast
        for m in (plain, cached):  # an in-place write (e.g. load_state_dict) bumps the version
            m.base_model.model.model.layers[0].mlp.up_proj.weight.mul_(1.5)
        _, logits_c = _loss(cached, ids)
        _, logits_p = _loss(plain, ids)
    assert layer._cast is not first
    assert torch.equal(layer._cast, layer.weight.to(torch.bfloat16))
    assert torch.equal(logits_p, logits_c)
    copied = copy.deepcopy(layer)  # e.g. the export's merged copy: no second bf16 copy carried along
    assert copied._cast is None and layer._cast is not None
    assert torch.equal(copied.weight, layer.weight)


def test_no_copy_outside_autocast_or_for_trainable_weights():
    model, _ = tiny_model_and_tokenizer(seed=1)
    ref = copy.deepcopy(model)
    cache_frozen_casts(model)  # full fine-tuning: every weight requires grad
    ids = torch.randint(3, 100, (2, 5), generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(model(input_ids=ids).logits, ref(input_ids=ids).logits)
    assert all(m._cast is None for m in model.modules() if isinstance(m, FrozenCastLinear))
    model.requires_grad_(False)
    ref.requires_grad_(False)
    assert torch.equal(model(input_ids=ids).logits, ref(input_ids=ids).logits)  # fp32: no autocast
    assert all(m._cast is None for m in model.modules() if isinstance(m, FrozenCastLinear))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(model(input_ids=ids).logits, ref(input_ids=ids).logits)
    assert all(m._cast is not None for m in model.modules() if isinstance(m, FrozenCastLinear))


def test_setup_caches_casts_under_bf16_lora_unless_turned_off(tiny_model_dir, tmp_path):
    from tests.conftest import tiny_run_config
    from zoo.run.fingerprint import fingerprint
    from zoo.run.setup import setup

    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    kinds = {}
    for on in (True, False):
        cfg = tiny_run_config(
            tiny_model_dir, tmp_path / str(on), model_opts={"autocast": "bf16", "lora": lora, "cache_casts": on}
        )
        st = setup(cfg)
        linears = [m for m in st.models.policy.modules() if isinstance(m, torch.nn.Linear)]
        kinds[on] = {type(m) for m in linears}
        kinds[(on, "digest")] = fingerprint(cfg)[0]
    assert kinds[True] == {FrozenCastLinear} and kinds[False] == {torch.nn.Linear}
    assert kinds[(True, "digest")] == kinds[(False, "digest")]  # the same values: the same run
