"""GRPO-TTA end to end on a tiny CLIP built in code and synthetic PIL images (zoo.run.tta)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from zoo.config.tta import PolicySpec, TTASpec
from zoo.config.variant import load_variant
from zoo.rewards.compute import resolve_rewards
from zoo.run.tta import Adapter, build_policy, grpo_step, run_tta, tpt_step
from zoo.step.tta import tta_slots
from zoo.tasks.shapes import shape_rows

POLICY = {"pretrain_steps": 100, "pretrain_size": 90}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # the pre-training cache goes to a temporary folder
        mp.setenv("ZOO_CACHE", str(tmp_path_factory.mktemp("zoo-cache")))
        return build_policy(PolicySpec(**POLICY))  # about 3 s on one CPU thread


def spec(**kw) -> TTASpec:
    return TTASpec.model_validate({"policy": POLICY, **kw})


def _state(enc) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in enc.model.named_parameters()}


@pytest.mark.parametrize("adapt", ["norms", "visual"])
def test_two_steps_change_only_the_declared_parameters(pretrained, adapt):
    enc = copy.deepcopy(pretrained)
    before = _state(enc)
    res = run_tta(spec(adapt=adapt, steps=2, reset="none", data={"size": 3}), enc=enc)
    assert res.images == 3 and len(res.records) == 3
    assert all(math.isfinite(r["reward"]) and math.isfinite(r["loss"]) for r in res.records)
    changed = {n for n, p in enc.model.named_parameters() if not torch.equal(p.detach(), before[n])}
    declared = {n for n, p in enc.model.named_parameters() if p.requires_grad}
    assert changed and changed <= declared
    if adapt == "norms":
        assert all("norm" in n for n in changed)
    assert not any(n.startswith(("text_model.", "text_projection.")) or n == "logit_scale" for n in changed)


def test_accuracy_on_a_separable_set_does_not_get_worse(pretrained):
    res = run_tta(spec(data={"size": 18, "seed": 5}), enc=copy.deepcopy(pretrained))
    assert res.zero_shot_accuracy >= 0.5  # the pre-trained model separates the clean classes (chance 1/9)
    assert res.accuracy >= res.zero_shot_accuracy


def _adapter(enc, cfg: TTASpec):
    v = load_variant(cfg.variant)
    resolved = resolve_rewards(cfg.rewards)
    ctx = {"slots": tta_slots(v), "fns": [f for f, _ in resolved], "weights": [w for _, w in resolved]}
    ctx.update(method="variant", group_size=v.group_size, epochs=1, gen=torch.Generator().manual_seed(0))
    return Adapter.of(enc, cfg), ctx


def test_one_step_moves_the_dual_encoder_toward_the_reward_favoured_class(pretrained):
    cfg = spec(adapt="visual", lr=1e-2, rewards=["tta_alignment"])
    ad, ctx = _adapter(copy.deepcopy(pretrained), cfg)
    px = ad.enc.pixels([shape_rows(1, seed=2)[0]["images"][0]])  # [1, 3, 32, 32]
    with torch.no_grad():
        p0 = ad.enc.logits(px).softmax(-1)[0]
    third = int(p0.topk(3).indices[2])  # the group's least probable candidate
    ref_cos = [[0.9 if c == third else 0.0 for c in range(9)]]  # a hand-made frozen judge that favours it
    grpo_step(ad, px, ref_cos, cfg, ctx)
    with torch.no_grad():
        p1 = ad.enc.logits(px).softmax(-1)[0]
    assert p1[third] > p0[third]
    top = int(p0.argmax())
    assert p1[top] < p0[top]


def test_episodic_reset_restores_parameters_and_optimizer(pretrained):
    cfg = spec(lr=1e-2)
    ad, ctx = _adapter(copy.deepcopy(pretrained), cfg)
    start = [p.detach().clone() for p in ad.params]
    px = ad.enc.pixels([shape_rows(4, seed=2)[i]["images"][0] for i in range(4)])
    with torch.no_grad():
        ref_cos = (ad.ref.image_embeddings(px) @ ad.ref.class_embeddings().T).tolist()
    grpo_step(ad, px, ref_cos, cfg, ctx)
    assert any(not torch.equal(p, s) for p, s in zip(ad.params, start))
    ad.reset()
    assert all(torch.equal(p, s) for p, s in zip(ad.params, start)) and not ad.opt.state_dict()["state"]


def test_tpt_step_lowers_the_entropy_of_the_mean_prediction(pretrained):
    cfg = spec(adapt="visual", lr=1e-2, method="tpt")
    ad, _ = _adapter(copy.deepcopy(pretrained), cfg)
    px = ad.enc.pixels([r["images"][0] for r in shape_rows(4, seed=3, shift="contrast", severity=4)][:1] * 4)
    first = tpt_step(ad, px)["loss"]
    assert tpt_step(ad, px)["loss"] < first


def test_a_diverged_update_stops_the_run_instead_of_reporting_a_nan_models_accuracy(pretrained):
    from zoo.run.tta import TTADiverged

    enc = copy.deepcopy(pretrained)
    with pytest.raises(TTADiverged, match=r"loss is nan at step \d+ of 3 .*tta\.lr, now 1e\+06"):
        run_tta(spec(adapt="visual", lr=1.0e6, reset="none", data={"size": 4}), enc=enc)


def test_one_update_scores_kept_views_x_k_candidates_as_zoo_show_and_the_docs_say(monkeypatch):
    """N of grpo_tta's token_mean is (kept views) x K for the one image adapted: ceil(0.25 x 16) = 4 views
    x 3 = 12 one-token completions, not images x K; `zoo show grpo_tta` (the registry's source for
    `aggregate`) and docs/reference/grpo-tta.md say the same."""
    import random
    from pathlib import Path

    import zoo.run.tta as run_tta_mod
    from zoo.config.variant import load_variant as lv
    from zoo.run.tta import adapt_image, variant_context

    seen = []
    real = run_tta_mod.tta_loss
    monkeypatch.setattr(
        run_tta_mod, "tta_loss", lambda slots, logp, *a: seen.append(logp.shape) or real(slots, logp, *a)
    )
    cfg = spec(policy={"pretrain_steps": 0, "cache": False}, views=16, keep=0.25, steps=1)
    enc = build_policy(cfg.policy)
    image = shape_rows(2, 0)[0]["images"][0]
    adapt_image(Adapter.of(enc, cfg), image, cfg, variant_context(cfg), random.Random(0))
    assert seen == [torch.Size([12])]
    assert "N = kept views x K" in lv("grpo_tta").sources["aggregate"]
    doc = (Path(__file__).resolve().parents[2] / "docs/reference/grpo-tta.md").read_text()
    assert "N = kept views x K" in doc and "images x K" not in doc
