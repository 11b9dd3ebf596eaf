"""The dual_encoder policy source (zoo.models.dual_encoder): CLIP logits and the declared parameters."""

from __future__ import annotations

import pytest
import torch

from zoo.models.dual_encoder import adapt_parameters, tiny_dual_encoder
from zoo.tasks.shapes import classes, shape_rows


@pytest.fixture
def enc():
    return tiny_dual_encoder(classes(), seed=0)


def test_logits_are_scale_times_cosine(enc):
    px = enc.pixels([r["images"][0] for r in shape_rows(3, seed=0)])  # [3, 3, 32, 32]
    img, txt = enc.image_embeddings(px), enc.class_embeddings()
    assert img.norm(dim=-1).tolist() == pytest.approx([1.0] * 3, abs=1e-5)
    assert txt.norm(dim=-1).tolist() == pytest.approx([1.0] * 9, abs=1e-5)
    logits = enc.logits(px)
    assert logits.shape == (3, 9)
    manual = torch.nn.functional.cosine_similarity(img[:, None], txt[None], dim=-1) * enc.model.logit_scale.exp()
    assert torch.allclose(logits, manual, atol=1e-5)


def test_class_embeddings_are_cached_without_gradients(enc):
    assert enc.class_embeddings() is enc.class_embeddings() and not enc.class_embeddings().requires_grad


def _trainable(enc) -> set[str]:
    return {n for n, p in enc.model.named_parameters() if p.requires_grad}


def test_norms_declares_only_the_vision_layernorms(enc):
    adapt_parameters(enc, "norms")
    names = _trainable(enc)
    assert names and all(n.startswith("vision_model.") and ("norm" in n) for n in names)
    assert "vision_model.pre_layrnorm.weight" in names and "vision_model.post_layernorm.bias" in names
    assert "vision_model.encoder.layers.1.layer_norm2.weight" in names


def test_visual_declares_the_vision_tower_and_its_projection_only(enc):
    adapt_parameters(enc, "visual")
    names = _trainable(enc)
    vision = {n for n, _ in enc.model.named_parameters() if n.startswith(("vision_model.", "visual_projection."))}
    assert names == vision and "logit_scale" not in names


def test_unknown_adapt_names_the_key(enc):
    with pytest.raises(ValueError, match="key 'adapt': must be one of visual, norms, got 'text'"):
        adapt_parameters(enc, "text")
