"""Normalizers: cases C1 (per-group statistics, row order), C16 (GDPO over completions), C17
(the all-alike tolerance), batch whitening, NaN rows, padding."""

import math

import pytest
import torch

from zoo.checks.variant import check_variant
from zoo.components.objective import combine_objectives
from zoo.components.stats import group_constant
from zoo.config.variant import build_components, load_variant
from zoo.core.registry import ComponentError, build
from zoo.core.types import AdvantageInputs

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
        {"name": "batch_std", "level": "completion"},
        {"name": "none", "eps": 1e-6},
    ],
)
def test_bad_parameters_rejected(spec):
    with pytest.raises(ComponentError):
        build("normalizer", spec)


def test_shape_errors():
    with pytest.raises(ValueError, match="group_ids"):
        build("normalizer", "group_std")(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(3))


def test_batch_std_unknown_level_names_the_allowed_ones():
    with pytest.raises(ComponentError, match="level must be one of token, sequence, got 'tokens'"):
        build("normalizer", {"name": "batch_std", "level": "tokens"})


# ---- C16: GDPO's batch statistics are over completions ------------------------------------------


def gdpo_pipeline(objectives, group_ids, lengths, **normalizer):
    """registry/gdpo.yaml's objective_norm -> sum -> advantage -> normalizer; returns [N, T]."""
    comps = build_components(load_variant("gdpo"))
    if normalizer:
        comps["normalizer"] = build("normalizer", {"name": "batch_std", "shift_mean": True, **normalizer})
    gids = torch.as_tensor(group_ids)
    lengths = torch.as_tensor(lengths)
    mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]  # [N, T]
    scores = combine_objectives(comps["objective_norm"](torch.as_tensor(objectives), gids))
    adv = comps["advantage"](AdvantageInputs(scores, mask, gids, torch.zeros(mask.shape))).advantages
    return comps["normalizer"](adv, mask, gids), mask


C16 = dict(
    objectives=[[1.0], [1.0], [1.0], [1.0], [0.0], [0.0]], group_ids=[0, 0, 0, 1, 1, 1], lengths=[2, 5, 1, 4, 1, 3]
)


def test_c16_gdpo_all_alike_group_is_exactly_zero_with_unequal_lengths():
    out, mask = gdpo_pipeline(**C16)
    assert build_components(load_variant("gdpo"))["normalizer"].resolved()["level"] == "sequence"
    assert torch.equal(out[:3], torch.zeros(3, 5))  # group 0 scored alike: exactly 0
    # group 1 [1, 0, 0]: mean 1/3, std sqrt(1/3) -> z = [2/3, -1/3, -1/3] / (sqrt(1/3) + 1e-6); the
    # group mean of z is 0, so A = z; over the 6 completions the mean is 0 and the unbiased std is
    # sqrt(sum z^2 / 5) -> A / (std + 1e-6) = [1.825739, -0.912870, -0.912870]
    k = math.sqrt(1 / 3) + 1e-6
    z = [2 / 3 / k, -1 / 3 / k, -1 / 3 / k]
    sd = math.sqrt(sum(x * x for x in z) / 5)
    expect = torch.tensor([x / (sd + 1e-6) for x in z])
    torch.testing.assert_close(out[3:, 0], expect, atol=1e-6, rtol=0)
    torch.testing.assert_close(expect, torch.tensor([1.825739, -0.912870, -0.912870]), atol=1e-6, rtol=0)
    assert torch.equal(out[3:], torch.where(mask[3:], out[3:, :1], torch.zeros(())))  # constant on real tokens


def test_c16_token_level_statistics_are_the_wrong_answer():
    # over tokens (lengths 4, 1, 3 for z, -z/2, -z/2) the batch mean is 2 z / 16 = z / 8, so the
    # all-alike group gets -(z / 8) / (std + eps) with std = z sqrt(4.75 / 15): -0.2221305
    out, _ = gdpo_pipeline(**C16, level="token")
    z = 2 / 3 / (math.sqrt(1 / 3) + 1e-6)
    wrong = -(z / 8) / (z * math.sqrt(4.75 / 15) + 1e-6)
    torch.testing.assert_close(out[:3, 0], torch.full((3,), wrong), atol=1e-6, rtol=0)
    assert abs(wrong + 0.2221305) < 1e-6


def test_batch_std_sequence_level_hand_worked():
    # completions: row 0 tokens [1, 3] (value 2), row 1 [4] (value 4); row 2 NaN (left out, stays
    # NaN); row 3 has no real token (left out, all padding). Mean 3, unbiased std sqrt(2).
    adv = torch.tensor([[1.0, 3.0, NAN], [4.0, 1e30, 0.0], [NAN, NAN, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    gids = torch.tensor([0, 1, 2, 3])
    d = math.sqrt(2) + 1e-6
    plain = build("normalizer", {"name": "batch_std", "level": "sequence"})(adv, mask, gids)
    torch.testing.assert_close(
        plain, torch.tensor([[1 / d, 3 / d, 0.0], [4 / d, 0.0, 0.0], [NAN, NAN, 0.0], [0.0, 0.0, 0.0]]), equal_nan=True
    )
    shifted = build("normalizer", {"name": "batch_std", "level": "sequence", "shift_mean": True})(adv, mask, gids)
    torch.testing.assert_close(
        shifted, torch.tensor([[-2 / d, 0.0, 0.0], [1 / d, 0.0, 0.0], [NAN, NAN, 0.0], [0.0, 0.0, 0.0]]), equal_nan=True
    )
    assert shifted.dtype == torch.float32


def test_check_variant_warns_token_level_mean_shift_after_group_baseline(tmp_path):
    tok = tmp_path / "gdpo_tok.yaml"
    tok.write_text("name: gdpo_tok\nbase: gdpo\nslots:\n  normalizer: {name: batch_std, shift_mean: true}\n")
    (msg,) = [w for w in check_variant(load_variant(tok)).warnings if "token-level batch mean" in w]
    assert "group_mean" in msg and "level: sequence" in msg and str(tok) in msg
    for name in ("gdpo", "ppo", "reinforce_pp"):  # sequence level, or no group baseline: no warning
        assert not [w for w in check_variant(load_variant(name)).warnings if "token-level batch mean" in w], name


# ---- C17: the all-alike tolerance -----------------------------------------------------------------


def test_c17_batch_std_constant_batch_with_unequal_lengths_is_zero():
    # 0.35 on every real token of rows of lengths 1..11: the float32 token mean was 0.35 - 3e-8 and
    # the result 0.0289 (before); in float64 the mean is exact and the std 0, so the result is 0
    lengths = torch.tensor([1, 7, 11, 2, 3, 6])
    mask = torch.arange(11)[None, :] < lengths[:, None]
    adv = torch.where(mask, torch.tensor(0.35), torch.zeros(()))
    for level in ("token", "sequence"):
        out = build("normalizer", {"name": "batch_std", "shift_mean": True, "level": level})(adv, mask, torch.zeros(6))
        assert torch.equal(out, torch.zeros(6, 11)), level


def test_c17_group_constant_relative_tolerance():
    # one float32 ulp apart (std 2e-8 <= 1e-6 max(1, 0.35)): alike; 1e-7 vs 0 (std 7e-8 <= 1e-6):
    # alike; 1.0 vs 1.00001 (std 7.1e-6 > 1e-6): not; 1000 vs 1000.0001 (one ulp, std 4.3e-5 <= 1e-3): alike
    x = torch.tensor([0.35, 0.35 + 3e-8, 1e-7, 0.0, 1.0, 1.00001, 1000.0, 1000.0001])
    flags = group_constant(x, torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    assert flags.tolist() == [True, True, True, True, False, False, True, True]
    assert x[0] != x[1] and x[6] != x[7]  # really different float32 values
