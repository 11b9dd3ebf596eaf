"""Objective normalisation and combination: case C15 (MO-GRPO vs GRPO) and properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.components.objective import combine_objectives
from zoo.core.registry import ComponentError, build
from zoo.core.types import AdvantageInputs

NAN = float("nan")
C15 = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])  # correctness, format


def pipeline(objectives, group_ids, objective_norm, normalizer, weights=None, t=2):
    """objective_norm -> combine -> group_mean -> normalizer, all through the registry; [N]."""
    gids = torch.as_tensor(group_ids)
    mask = torch.ones(objectives.shape[0], t, dtype=torch.bool)
    scores = combine_objectives(build("objective_norm", objective_norm)(objectives, gids), weights)
    adv = build("advantage", "group_mean")(AdvantageInputs(scores, mask, gids, torch.zeros(mask.shape))).advantages
    return build("normalizer", normalizer)(adv, mask, gids)[:, 0]


def test_c15_mo_grpo():
    got = pipeline(C15, [0] * 4, "group_zscore", "none")
    torch.testing.assert_close(got, torch.tensor([1.366023, -0.366025, 1.366023, -2.366021]), atol=1e-5, rtol=0)


def test_c15_grpo_on_the_sum():
    got = pipeline(C15, [0] * 4, "none", "group_std")
    torch.testing.assert_close(got, torch.tensor([0.783349, -0.261116, 0.783349, -1.305581]), atol=1e-5, rtol=0)


def test_c15_weighted_mo_grpo():
    got = pipeline(C15, [0] * 4, "group_zscore", "none", weights=[0.7, 0.3])
    torch.testing.assert_close(got, torch.tensor([0.756216, -0.456217, 0.756216, -1.056216]), atol=1e-5, rtol=0)


def test_group_zscore_hand_worked_two_groups():
    # group 9: column 0 [1, 0, 1, 0] -> +-sqrt(3)/2; column 1 equal (0.9) -> exactly 0
    # group 2 (rows interleaved): column 0 [2, 4] -> -+1/sqrt(2); column 1 [5, 1] -> +-1/sqrt(2)
    obj = torch.tensor([[1.0, 0.9], [2.0, 5.0], [0.0, 0.9], [1.0, 0.9], [4.0, 1.0], [0.0, 0.9]])
    gids = torch.tensor([9, 2, 9, 9, 2, 9])
    z = build("objective_norm", "group_zscore")(obj, gids)
    a, b = math.sqrt(3) / 2, 1 / math.sqrt(2)
    expect = torch.tensor([[a, 0.0], [-b, b], [-a, 0.0], [a, 0.0], [b, -b], [-a, 0.0]])
    torch.testing.assert_close(z, expect, atol=1e-5, rtol=0)
    assert torch.equal(z[[0, 2, 3, 5], 1], torch.zeros(4))


def test_group_zscore_constant_and_singleton_columns_are_zero_never_nan():
    obj = torch.tensor([[0.9, 3.0], [0.9, 3.0], [0.9, 3.0], [7.0, -1.0]])
    z = build("objective_norm", "group_zscore")(obj, torch.tensor([0, 0, 0, 1]))
    assert torch.equal(z, torch.zeros(4, 2))


def test_b19_a_nan_objective_keeps_the_rows_other_objectives_under_group_zscore():
    # correctness, format; row 4 could not be scored for correctness, row 5 for nothing
    obj = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [NAN, 1.0], [NAN, NAN]])
    gids = torch.zeros(6, dtype=torch.long)
    z = build("objective_norm", "group_zscore")(obj, gids)
    # column 0 over its 4 valid values [1, 0, 1, 0]: mean 0.5, unbiased std sqrt(1/3) -> +-0.866025;
    # column 1 over its 5 valid values [1, 1, 1, 0, 1]: mean 0.8, std sqrt(0.2) -> 0.447214 / -1.788854
    a, hi, lo = 0.5 / math.sqrt(1 / 3), 0.2 / math.sqrt(0.2), -0.8 / math.sqrt(0.2)
    expect = torch.tensor([[a, hi], [-a, hi], [a, hi], [-a, lo], [0.0, hi], [NAN, NAN]])
    torch.testing.assert_close(z, expect, atol=1e-5, rtol=0, equal_nan=True)
    scores = combine_objectives(z)
    assert scores[4] == pytest.approx(hi, abs=1e-5)  # keeps its format z-score; correctness neutral (0)
    assert torch.isnan(scores[5]) and torch.isfinite(scores[:5]).all()
    # neither NaN row changes another row: without them, rows 0-3 get the same column-0 z-scores
    torch.testing.assert_close(z[:4, 0], build("objective_norm", "group_zscore")(obj[:4], gids[:4])[:, 0])
    # through group_mean: the unscored row stays NaN (advantage 0 later), row 4 gets a real advantage
    adv = pipeline(obj, gids, "group_zscore", "none")
    assert torch.isnan(adv[5]) and torch.isfinite(adv[:5]).all() and adv[4] != 0


def test_b19_raw_objectives_have_no_neutral_value_so_the_row_is_left_out():
    obj = torch.tensor([[1.0, 1.0], [0.0, 1.0], [NAN, 1.0]])
    gids = torch.zeros(3, dtype=torch.long)
    scores = combine_objectives(build("objective_norm", "none")(obj, gids))
    assert scores[:2].tolist() == [2.0, 1.0] and torch.isnan(scores[2])
    adv = pipeline(obj, gids, "none", "none")
    assert adv[:2].tolist() == [0.5, -0.5] and torch.isnan(adv[2])  # the group mean is over rows 0-1


def test_identity():
    obj = torch.tensor([[1.0, NAN], [2.0, 3.0]])
    torch.testing.assert_close(build("objective_norm", "none")(obj, torch.tensor([0, 0])), obj, equal_nan=True)


def test_combine_objectives():
    obj = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.5, 2.0], [1.0, NAN]])
    torch.testing.assert_close(combine_objectives(obj, [0.7, 0.3]), torch.tensor([0.7, 0.7, 0.95, NAN]), equal_nan=True)
    torch.testing.assert_close(combine_objectives(obj[:3]), torch.tensor([1.0, 1.0, 2.5]))
    assert torch.isnan(combine_objectives(obj, torch.tensor([1.0, 0.0]))[3])  # NaN even at weight 0
    with pytest.raises(ValueError, match="weights"):
        combine_objectives(obj, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="objectives"):
        combine_objectives(torch.zeros(3))


@given(st.integers(0, 10_000))
@settings(max_examples=30, deadline=None)
def test_mo_grpo_with_one_objective_equals_grpo(seed):
    gen = torch.Generator().manual_seed(seed)
    obj = torch.randint(0, 3, (12, 1), generator=gen).float() * torch.rand(1, generator=gen)  # ties likely
    gids = torch.randint(0, 4, (12,), generator=gen)
    mo = pipeline(obj, gids, "group_zscore", "none")
    grpo = pipeline(obj, gids, "none", "group_std")
    torch.testing.assert_close(mo, grpo, atol=1e-5, rtol=1e-5)


@given(st.integers(0, 10_000))
@settings(max_examples=20, deadline=None)
def test_group_zscore_row_order_invariance(seed):
    gen = torch.Generator().manual_seed(seed)
    obj = torch.randn(10, 3, generator=gen)
    gids = torch.randint(0, 3, (10,), generator=gen)
    perm = torch.randperm(10, generator=gen)
    f = build("objective_norm", "group_zscore")
    torch.testing.assert_close(f(obj[perm], gids[perm]), f(obj, gids)[perm])


@pytest.mark.parametrize("spec", [{"name": "group_zscore", "eps": 0}, {"name": "group_zscore", "eps": -1.0}])
def test_bad_parameters_rejected(spec):
    with pytest.raises(ComponentError):
        build("objective_norm", spec)
