"""The pre-trained dual encoder is cached (zoo.models.dual_cache): the second load does not pre-train."""

from __future__ import annotations

import pytest
import torch

from zoo.config.tta import PolicySpec
from zoo.models import dual_cache

SPEC = PolicySpec(pretrain_steps=5, pretrain_size=18)


@pytest.fixture(autouse=True)
def _zoo_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "zoo-cache"))


def _weights(enc) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in enc.model.state_dict().items()}


def test_the_second_load_reads_the_cache_and_gives_identical_weights(monkeypatch, tmp_path):
    first = dual_cache.pretrained_dual_encoder(SPEC)
    folder = dual_cache.cache_dir(SPEC)
    assert folder.parent == tmp_path / "zoo-cache" / "models" and (folder / "model.safetensors").is_file()

    def no_training(*a, **k):
        raise AssertionError("pre-trained again although the cache holds this key")

    monkeypatch.setattr(dual_cache, "pretrain_contrastive", no_training)
    second = dual_cache.pretrained_dual_encoder(SPEC)
    a, b = _weights(first), _weights(second)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    fresh = dual_cache.tiny_dual_encoder(first.classes, SPEC.seed)  # the untrained init differs: training happened
    assert not all(torch.equal(v, fresh.model.state_dict()[k]) for k, v in a.items())
    px = first.pixels([torch.zeros(3, 32, 32).numpy().transpose(1, 2, 0).astype("uint8")])
    assert torch.equal(first.logits(px), second.logits(px))


def test_the_key_follows_every_setting_but_not_the_cache_flag():
    base = dual_cache.cache_dir(SPEC)
    assert dual_cache.cache_dir(SPEC.model_copy(update={"cache": False})) == base
    for change in ({"seed": 1}, {"pretrain_steps": 6}, {"pretrain_size": 19}, {"pretrain_lr": 1e-3}, {"hidden": 16}):
        assert dual_cache.cache_dir(SPEC.model_copy(update=change)) != base, change


def test_cache_false_and_zero_steps_write_nothing(tmp_path):
    dual_cache.pretrained_dual_encoder(SPEC.model_copy(update={"cache": False}))
    dual_cache.pretrained_dual_encoder(SPEC.model_copy(update={"pretrain_steps": 0}))
    assert not (tmp_path / "zoo-cache").exists()
