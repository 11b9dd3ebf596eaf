"""Normalizers: case C1 (per-group statistics, row order), batch whitening, NaN rows, padding."""
import math

import pytest
import torch

from zoo.components.types import AdvantageInputs
from zoo.registry import ComponentError, build

NAN = float("nan")


def grpo(rewards, group_ids, t=3, eps=1e-6):
    """group_mean + group_std through the registry; returns the [N] per-row advantage."""
    mask = torch.ones(len(rewards), t, dtype=torch.bool)
    gids = torch.as_tensor(group_ids)
    inp = AdvantageInputs(torch.as_tensor(rewards, dtype=torch.float32), mask, gids, torch.zeros(mask.shape))
    adv = build("advantage", "group_mean")(inp).advantages
    out = build("normalizer", {"name": "group_std", "eps": eps})(adv, mask, gids)
    assert torch.equal(out, out[:, :1].expand_as(out))  # constant along each row
    return out[:, 0]


C1_RIGHT = torch.tensor([0.7071058, -0.7071058, 0.0, 0.0])


def test_c1_group_statistics_per_prompt():
    got = grpo([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1])
    torch.testing.assert_close(got, C1_RIGHT, atol=1e-6, rtol=0)
    assert torch.equal(got[2:], torch.zeros(2))  # the all-alike group is exactly 0


def test_c1_row_order_and_id_values_do_not_matter():
    rewards, gids = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    for perm in ([2, 0, 3, 1], [3, 2, 1, 0], [1, 3, 0, 2]):
        p = torch.tensor(perm)
        got = grpo(rewards[p], (gids[p] * 11 + 5).tolist())
        torch.testing.assert_close(got, C1_RIGHT[p], atol=1e-6, rtol=0)


def test_c1_per_batch_statistics_are_the_wrong_answer():
    # batch whitening of the raw rewards (one token each; mean 0.75, std 0.5) gives C1's documented
    # wrong answer: batch_std really computes batch statistics, and group_std does not
    mask = torch.ones(4, 1, dtype=torch.bool)
    raw = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    wrong = build("normalizer", {"name": "batch_std", "shift_mean": True})(raw, mask, torch.tensor([0, 0, 1, 1]))
    torch.testing.assert_close(wrong[:, 0], torch.tensor([0.499999, -1.499997, 0.499999, 0.499999]), atol=1e-6, rtol=0)
    assert (grpo([1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1]) - wrong[:, 0]).abs().max() > 0.4


def test_group_std_degenerate_groups_are_exactly_zero():
    # 0.9 x 3 in float32: mean off by 6e-8 and std 7e-8 -> would be ~0.06 without the guard
    got = grpo([0.9, 0.9, 0.9, 2.0, 0.5, 1.0], [0, 0, 0, 1, 2, 2])
    assert torch.equal(got[:4], torch.zeros(4))
    torch.testing.assert_close(got[4:], torch.tensor([-0.25, 0.25]) / (math.sqrt(0.125) + 1e-6))
    # a non-centred input in a group of one is 0 too (no division by eps alone)
    adv = torch.tensor([[3.0, 3.0]])
    out = build("normalizer", "group_std")(adv, torch.ones(1, 2, dtype=torch.bool), torch.tensor([0]))
    assert torch.equal(out, torch.zeros(1, 2))


def test_group_std_nan_row_left_out_and_padding_zero():
    # group 0 valid rows [2, 0, 1] (mean 1, std 1) and one NaN row; padding holds garbage
    adv = torch.tensor([[1.0, 1.0, NAN], [-1.0, math.inf, 5.0], [0.0, 0.0, 0.0], [NAN, NAN, 7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    out = build("normalizer", "group_std")(adv, mask, torch.zeros(4, dtype=torch.long))
    s = 1 / (1 + 1e-6)
    expect = torch.tensor([[s, s, 0.0], [-s, 0.0, 0.0], [0.0, 0.0, 0.0], [NAN, NAN, 0.0]])
    torch.testing.assert_close(out, expect, equal_nan=True)


def test_batch_std_hand_worked():
    # real tokens [1, 2, 3]: mean 2, unbiased std 1; the NaN row is left out and stays NaN
    adv = torch.tensor([[1.0, 2.0, NAN], [3.0, 1e30, -math.inf], [NAN, NAN, 4.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    gids = torch.tensor([0, 1, 2])
    d = 1 + 1e-6
    plain = build("normalizer", "batch_std")(adv, mask, gids)
    torch.testing.assert_close(
        plain, torch.tensor([[1 / d, 2 / d, 0.0], [3 / d, 0.0, 0.0], [NAN, NAN, 0.0]]), equal_nan=True
    )
    shifted = build("normalizer", {"name": "batch_std", "shift_mean": True})(adv, mask, gids)
    torch.testing.assert_close(
        shifted, torch.tensor([[-1 / d, 0.0, 0.0], [1 / d, 0.0, 0.0], [NAN, NAN, 0.0]]), equal_nan=True
    )


def test_batch_std_without_shift_keeps_zero_groups_zero():
    adv = torch.tensor([[0.0, 0.0], [0.5, 0.5], [-0.5, -0.5]])
    out = build("normalizer", "batch_std")(adv, torch.ones(3, 2, dtype=torch.bool), torch.tensor([0, 1, 1]))
    assert torch.equal(out[0], torch.zeros(2))


def test_none_is_identity_with_zero_padding():
    adv = torch.tensor([[0.3, NAN], [NAN, -2.0]])
    mask = torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)
    out = build("normalizer", "none")(adv, mask, torch.tensor([0, 0]))
    torch.testing.assert_close(out, torch.tensor([[0.3, 0.0], [NAN, -2.0]]), equal_nan=True)


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "group_std", "eps": 0.0},
        {"name": "group_std", "eps": -1e-6},
        {"name": "batch_std", "eps": float("nan")},
        {"name": "batch_std", "shift_mean": "yes"},
        {"name": "none", "eps": 1e-6},
    ],
)
def test_bad_parameters_rejected(spec):
    with pytest.raises(ComponentError):
        build("normalizer", spec)


def test_shape_errors():
    with pytest.raises(ValueError, match="group_ids"):
        build("normalizer", "group_std")(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(3))
