"""The group-relative update of GRPO-TTA (zoo.step.tta) through zoo's components, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.config.variant import VariantError, load_variant
from zoo.models.dual_rollout import rollout
from zoo.step.tta import tta_loss, tta_slots


@pytest.fixture(scope="module")
def slots():
    return tta_slots(load_variant("grpo_tta"))


def test_group_z_score_and_its_gradient_by_hand(slots):
    # one image, K = 3 candidates with rewards (1, 0, 0): mean 1/3, sample std sqrt(1/3) ->
    # advantages (2/3, -1/3, -1/3) / 0.57735 = (1.1547, -0.5774, -0.5774); token_mean over 3 one-token rows,
    # ratio 1, so d loss / d logp_i = -A_i / 3
    logp = torch.log(torch.tensor([0.5, 0.3, 0.2])).requires_grad_()
    out = tta_loss(slots, logp, logp.detach(), torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long))
    assert out.advantages.tolist() == pytest.approx([1.1547, -0.5774, -0.5774], abs=1e-4)
    assert out.ratio.tolist() == [1.0, 1.0, 1.0]  # one update on fresh candidates: the clip does nothing
    out.loss.backward()
    assert logp.grad.tolist() == pytest.approx([-1.1547 / 3, 0.5774 / 3, 0.5774 / 3], abs=1e-4)


def test_rlcf_is_the_group_mean_baseline_without_std_or_ratio():
    # RLCF: A = r - mean over the K = 3 candidates = (2/3, -1/3, -1/3), REINFORCE: d loss / d logp = -A / 3
    rlcf = tta_slots(load_variant("rlcf"))
    assert rlcf.normalizer.name == "none" and rlcf.clip.name == "none" and load_variant("rlcf").group_size == 3
    logp = torch.log(torch.tensor([0.5, 0.3, 0.2])).requires_grad_()
    out = tta_loss(rlcf, logp, logp.detach(), torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long))
    assert out.advantages.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3], abs=1e-6)
    out.loss.backward()
    assert logp.grad.tolist() == pytest.approx([-2 / 9, 1 / 9, 1 / 9], abs=1e-6)


def test_groups_are_separate(slots):
    # two images: a group whose rewards tie has advantage 0 whatever the other group does
    logp = torch.zeros(4, requires_grad=True)
    out = tta_loss(slots, logp, logp.detach(), torch.tensor([2.0, 2.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    assert out.advantages.tolist() == pytest.approx([0.0, 0.0, 0.7071, -0.7071], abs=1e-4)


def test_one_update_moves_probability_toward_the_reward_favoured_class(slots):
    # hand-made policy: logits over 5 classes are a free parameter; the top-3 group is (0, 1, 2) and the
    # reward favours class 2, the least probable candidate
    theta = torch.tensor([[2.0, 1.5, 1.0, 0.0, -1.0]], requires_grad=True)
    roll = rollout(theta, 3, "topk")
    assert roll.candidates.tolist() == [[0, 1, 2]]
    scores = torch.tensor([0.0, 0.0, 1.0])
    before = theta.softmax(-1).detach()
    out = tta_loss(
        slots, roll.logp.reshape(-1), roll.logp.reshape(-1).detach(), scores, torch.zeros(3, dtype=torch.long)
    )
    out.loss.backward()
    # A = (-0.5774, -0.5774, 1.1547) sums to 0, so d loss / d theta = -(1/3) sum_i A_i (e_i - p) = -A / 3 on the group
    assert theta.grad[0].tolist() == pytest.approx([0.19245, 0.19245, -0.3849, 0.0, 0.0], abs=1e-4)
    with torch.no_grad():
        theta -= 0.5 * theta.grad
    after = theta.softmax(-1)
    assert after[0, 2] > before[0, 2] and after[0, 0] < before[0, 0] and after[0, 1] < before[0, 1]


def test_refuses_slots_a_label_free_one_class_update_cannot_use():
    with pytest.raises(VariantError, match=r"grpo\.yaml: key 'slots\.kl': must be none"):
        tta_slots(load_variant("grpo"))
    with pytest.raises(VariantError, match=r"key 'slots\.critic': must be null"):
        tta_slots(load_variant("ppo"))


def test_grpo_tta_is_grpo_without_kl_on_one_token(slots):
    v = load_variant("grpo_tta")
    assert v.group_size == 3 and v.updates.epochs == 1 and slots.kl.placement == "none"
    assert slots.advantage.name == "group_mean" and slots.normalizer.name == "group_std" and slots.clip.name == "ppo"
    assert math.isclose(slots.clip.params["eps"], 0.2)
