"""This year's peer bug reports as regression tests: each a hand-worked input, the right value and
the wrong value the bug gave. (TRL #5814, sequence weights from the product where ~1 was meant, is
tests/components/test_peer_losses.py::test_sequence_is_the_product_and_geometric_the_mean_of_the_token_ratios.)"""

import pytest
import torch

from zoo.checks.variant import check_reward_reads
from zoo.components.advantage.base import rloo
from zoo.components.filter import dynamic_sampling
from zoo.config.variant import load_variant
from zoo.core.registry import build
from zoo.core.types import AdvantageInputs, StepCounts


def test_verl_5625_token_mean_under_gradient_accumulation_weights_tokens_not_samples():
    """Two micro-batches of one optimizer step: one row of 4 tokens with loss 1 each, one row of 1
    token with loss 5. Right: 9 / 5 = 1.8 (every token counts once). The bug averaged the
    micro-batches' own token means as samples: (1 + 5) / 2 = 3.0."""
    agg = build("aggregate", "token_mean")
    counts = StepCounts(tokens=5.0, sequences=2.0, max_new_tokens=4)
    mb1 = agg(torch.ones(1, 4), torch.ones(1, 4, dtype=torch.bool), counts)
    mb2 = agg(torch.tensor([[5.0, 0, 0, 0]]), torch.tensor([[True, False, False, False]]), counts)
    assert float(mb1 + mb2) == pytest.approx(1.8)
    wrong = (1.0 + 5.0) / 2
    assert float(mb1 + mb2) != pytest.approx(wrong)


def test_nemo_rl_4158_dynamic_sampling_with_leave_one_out_keeps_and_drops_the_right_rollouts():
    """Two resampling rounds, each with prompt-major group ids 0 and 1 (the sampler offsets the
    second round's ids, zoo/step/sample.py). Round 0: groups [1, 1, 1, 1] (dropped) and [1, 0, 0, 0]
    (kept); round 1: [0, 0, 0, 0] (dropped) and [1, 1, 0, 0] (kept). Right: the kept rows' RLOO
    advantages are [1, -1/3, -1/3, -1/3] and [2/3, 2/3, -2/3, -2/3], each group against its own
    members. Wrong (the kept groups' ids collide, so the two kept groups share one leave-one-out
    baseline over 8 rows): the first row gets 1 - 2/7 = 0.714. (The PR itself was not read: this pins
    the group bookkeeping a filter plus leave-one-out depends on.)"""
    acc = torch.tensor([1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0], dtype=torch.float64)
    ids = torch.tensor([0] * 4 + [1] * 4 + [2] * 4 + [3] * 4)  # round 1 offset by 2
    keep = dynamic_sampling({"accuracy": acc}, ids)
    assert keep.tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4
    kept, kept_ids = acc[keep], ids[keep]
    mask = torch.ones(8, 3, dtype=torch.bool)
    adv = rloo(AdvantageInputs(kept, mask, kept_ids, torch.zeros(8, 3))).advantages[:, 0]
    right = [1, -1 / 3, -1 / 3, -1 / 3, 2 / 3, 2 / 3, -2 / 3, -2 / 3]
    assert adv.tolist() == pytest.approx(right)
    collided = rloo(AdvantageInputs(kept, mask, torch.zeros(8, dtype=torch.long), torch.zeros(8, 3))).advantages
    assert collided[0, 0].item() == pytest.approx(1 - 2 / 7) and collided[0, 0].item() != pytest.approx(right[0])


def test_openrlhf_1272_zero_variance_groups_with_continuous_rewards_are_caught():
    """A continuous reward whose group values are equal up to float32 rounding: 0.1 + 0.6 and 0.7
    (differ by 6e-8). Right: the group has zero variance (zero advantage) and is dropped. The bug's
    exact-equality test kept it; a group [0.7, 0.2] is kept either way."""
    r = torch.tensor([0.1], dtype=torch.float32) + torch.tensor([0.6], dtype=torch.float32)
    scores = torch.cat([r, torch.tensor([0.7, 0.7, 0.2], dtype=torch.float32)])
    ids = torch.tensor([0, 0, 1, 1])
    assert scores[0] != scores[1]  # exact equality would call group 0 mixed (the bug)
    assert dynamic_sampling({"reward": scores}, ids, metric="reward").tolist() == [False, False, True, True]


def test_verl_recipe_125_a_filter_on_the_shaped_score_is_warned():
    """DAPO's dynamic sampling on `reward` while `overlong_soft` adds its length penalty to the score:
    an all-correct group whose lengths differ is kept, with only the shaping as its advantage. Right:
    `zoo validate` warns and names accuracy; the bug filtered on the shaped score silently."""
    rewards = [build("reward", "correctness")]
    v = load_variant("dapo")
    shaped = v.slots.model_copy(update={"filter": [{"name": "dynamic_sampling", "metric": "reward"}]})
    _, warnings = check_reward_reads(shaped, rewards, {"max_new_tokens": 64})
    assert any("after length shaping" in w and "overlong_soft" in w for w in warnings), warnings
    _, plain = check_reward_reads(v.slots, rewards, {"max_new_tokens": 64})  # metric accuracy: no warning
    assert not any("after length shaping" in w for w in plain)
