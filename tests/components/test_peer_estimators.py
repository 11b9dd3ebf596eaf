"""The estimators the peers ship (maxrl, opo, remax, otb, gpg) on hand-worked cases, with NaN scores,
NaN/inf in padding and row permutations."""

import math

import pytest
import torch

from zoo.components.advantage.peer import gpg, maxrl, opo, otb, otb_baseline, remax
from zoo.core.registry import ComponentError, build
from zoo.core.types import AdvantageInputs

NAN, INF = float("nan"), float("inf")


def _inp(scores, lengths, groups, T=None, **extras):
    s = torch.tensor(scores, dtype=torch.float64)
    T = T or max(lengths)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return AdvantageInputs(
        s, mask, torch.tensor(groups), torch.zeros(len(scores), T, dtype=torch.float64), extras=extras
    )


def _row(res, inp):
    """One value per row (the first real token's)."""
    return res.advantages[:, 0].tolist()


def test_maxrl_divides_by_the_group_mean():
    inp = _inp([1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0], [2] * 12, [0] * 4 + [1] * 4 + [2] * 4)
    got = _row(maxrl(inp, eps=0.0), inp)
    # pass rate 0.5: (1 - .5) / .5 = 1, -1; pass rate 0.25: 3, -1; no success: 0
    assert got == pytest.approx([1, -1, -1, 1, 3, -1, -1, -1, 0, 0, 0, 0], rel=1e-12)


def test_opo_baseline_is_length_weighted():
    inp = _inp([1, 0, 1, 1, 0], [2, 4, 1, 3, 2], [7, 7, 3, 3, 3])
    got = _row(opo(inp), inp)
    # group 7: b = (2*1 + 4*0) / 6 = 1/3; group 3: b = (1 + 3) / 6 = 2/3
    assert got == pytest.approx([2 / 3, -1 / 3, 1 / 3, 1 / 3, -2 / 3], rel=1e-12)


def test_remax_subtracts_the_greedy_score_and_a_nan_baseline_makes_the_row_nan():
    inp = _inp([1.0, 0.0, 1.0], [2, 1, 2], [0, 1, 2], greedy_score=torch.tensor([0.5, 0.5, NAN]))
    adv = remax(inp).advantages
    assert adv[0].tolist() == [0.5, 0.5] and adv[1].tolist() == [-0.5, 0.0]
    assert torch.isnan(adv[2]).all()
    with pytest.raises(ValueError, match="greedy_score"):
        remax(_inp([1.0], [1], [0]))


def test_otb_hand_case():
    # two rows of one group, rewards-to-go [1, 1] and [0, 0]; energies [1, 1] and [3, 1] -> W [1, 2], [3, 4]
    inp = _inp([1.0, 0.0], [2, 2], [0, 0], otb_energy=torch.tensor([[1.0, 1.0], [3.0, 1.0]], dtype=torch.float64))
    res = otb(inp, eps=0.0)
    # B_0 = (1*1 + 0*3) / 4 = 0.25, B_1 = (1*2 + 0*4) / 6 = 1/3
    torch.testing.assert_close(res.advantages, torch.tensor([[0.75, 2 / 3], [-0.25, -1 / 3]], dtype=torch.float64))
    torch.testing.assert_close(res.returns, torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64))


def test_otb_single_member_group_gets_no_baseline():
    base = otb_baseline(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2, dtype=torch.bool), torch.tensor([0]))
    assert base.tolist() == [[0.0, 0.0]]


def test_gpg_rescales_by_batch_over_nonzero_rows():
    inp = _inp([1, 0, 0, 0, 1, 1], [2] * 6, [0, 0, 1, 1, 2, 2])
    # centred [.5, -.5, 0, 0, 0, 0]; paper: M = 4 zero-advantage rows, alpha 6 / 2 = 3
    assert _row(gpg(inp), inp) == pytest.approx([1.5, -1.5, 0, 0, 0, 0])
    # verl: alpha = B / #non-zero scores = 6 / 3 = 2
    assert _row(gpg(inp, count="score"), inp) == pytest.approx([1.0, -1.0, 0, 0, 0, 0])
    with pytest.raises(ComponentError):
        build("advantage", {"name": "gpg", "count": "rows"})


@pytest.mark.parametrize("name", ["maxrl", "opo", "gpg"])
def test_a_nan_score_stays_in_its_row(name):
    inp = _inp([1, NAN, 0, 1], [2, 2, 1, 2], [0, 0, 0, 0])
    adv = build("advantage", name)(inp).advantages
    assert torch.isnan(adv[1]).all() and torch.isfinite(adv[[0, 2, 3]]).all()


def _with_garbage(inp, fill):
    pad = ~inp.mask
    ex = {k: torch.where(pad, torch.full_like(v, fill), v) if v.dim() == 2 else v for k, v in inp.extras.items()}
    kl = torch.where(pad, torch.full_like(inp.kl_reward, fill), inp.kl_reward)
    return AdvantageInputs(inp.scores, inp.mask, inp.group_ids, kl, extras=ex)


def _random_inp(seed=0):
    g = torch.Generator().manual_seed(seed)
    n, t = 6, 5
    lengths = [5, 2, 4, 1, 3, 5]
    inp = _inp(torch.randint(0, 3, (n,), generator=g).double().tolist(), lengths, [4, 4, 4, 9, 9, 9], T=t)
    ex = {
        "greedy_score": torch.rand(n, generator=g, dtype=torch.float64),
        "otb_energy": torch.rand(n, t, generator=g, dtype=torch.float64),
    }
    return AdvantageInputs(inp.scores, inp.mask, inp.group_ids, inp.kl_reward, extras=ex)


@pytest.mark.parametrize("name", ["maxrl", "opo", "remax", "otb", "gpg"])
def test_padding_garbage_changes_nothing(name):
    inp = _random_inp(1)
    ref = build("advantage", name)(inp).advantages
    for fill in (NAN, INF):
        got = build("advantage", name)(_with_garbage(inp, fill)).advantages
        torch.testing.assert_close(got, ref, atol=0, rtol=0)
    assert (ref[~inp.mask] == 0).all()


@pytest.mark.parametrize("name", ["maxrl", "opo", "remax", "otb", "gpg"])
def test_permuting_rows_permutes_the_advantages(name):
    inp = _random_inp(2)
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    ref = build("advantage", name)(inp).advantages
    ex = {k: v[perm] for k, v in inp.extras.items()}
    p = AdvantageInputs(inp.scores[perm], inp.mask[perm], inp.group_ids[perm] * 7 + 1, inp.kl_reward[perm], extras=ex)
    torch.testing.assert_close(build("advantage", name)(p).advantages, ref[perm], atol=1e-12, rtol=0)
    assert math.isfinite(float(ref.abs().sum()))
