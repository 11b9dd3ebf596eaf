"""Pass@k advantages: hand-worked groups (verl grpo_passk; Chen et al. arXiv 2508.10751 eqs. 14-15),
k = 1 reduces to GRPO with the population std, row order and NaN rows."""

import math

import torch

from zoo.core.registry import build
from zoo.core.types import AdvantageInputs

NAN = float("nan")


def inp(scores, group_ids, T=2, lengths=None):
    n = len(scores)
    lengths = torch.full((n,), T) if lengths is None else torch.as_tensor(lengths)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return AdvantageInputs(torch.tensor(scores, dtype=torch.float32), mask, torch.tensor(group_ids), torch.zeros(n, T))


def adv(name, x, **params):
    return build("advantage", {"name": name, **params})(x).advantages


def test_pass_at_k_hand_worked():
    # group 7: s = [1, 0.5, 0]: best 1, second 0.5 -> 0.5; unbiased std of [1, .5, 0] = 0.5
    #   -> the best row gets 0.5 / (0.5 + 1e-6) = 0.999998, the others 0
    # group 3: s = [1, 1, 0]: a tie for the best -> every row 0
    # group 9: one row -> 0 (verl raises; our convention)
    x = inp([1.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.3], [7, 7, 7, 3, 3, 3, 9], lengths=[2, 1, 2, 2, 2, 1, 2])
    got = adv("pass_at_k", x)
    want = torch.tensor(
        [[0.5 / (0.5 + 1e-6)] * 2, [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    )
    torch.testing.assert_close(got, want)
    # without the std division: r_max - r_second = 0.5 on the best row's real tokens
    raw = adv("pass_at_k", x, scale_by_std=False)
    assert raw[0].tolist() == [0.5, 0.5] and float(raw[1:].abs().sum()) == 0.0


def test_pass_at_k_row_order_and_nan_row():
    x = inp([0.2, 0.9, NAN, 0.4, 0.1, 0.6], [0, 0, 0, 1, 1, 1])
    got = adv("pass_at_k", x)
    # group 0 without the NaN row: [0.2, 0.9] -> the 0.9 row gets 0.7 / (std + 1e-6), std = 0.7/sqrt(2)
    # group 1: [0.4, 0.1, 0.6] -> the 0.6 row gets (0.6 - 0.4) / (std + 1e-6); NaN row: NaN
    s0 = math.sqrt(2 * 0.35**2)  # unbiased std of [0.2, 0.9]
    s1 = math.sqrt(((0.4 - 11 / 30) ** 2 + (0.1 - 11 / 30) ** 2 + (0.6 - 11 / 30) ** 2) / 2)
    assert torch.isnan(got[2]).all()
    torch.testing.assert_close(
        got[[0, 1, 3, 4, 5], 0], torch.tensor([0.0, 0.7 / (s0 + 1e-6), 0.0, 0.0, 0.2 / (s1 + 1e-6)])
    )
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    y = AdvantageInputs(x.scores[perm], x.mask[perm], x.group_ids[perm], x.kl_reward[perm])
    torch.testing.assert_close(adv("pass_at_k", y), got[perm], equal_nan=True)


def test_analytic_hand_worked_k2():
    # group 0: N = 4, 1 correct, N_neg = 3, k = 2: R = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5, sigma = 0.5
    #   A_correct = (1 - 0.5) / 0.5 = 1; A_wrong = (1 - 0.5 - C(2,1)/C(3,1)) / 0.5 = (0.5 - 2/3) / 0.5 = -1/3
    # group 1: N = 3, N_neg = 1 < k: every 2-subset passes, R = 1, sigma = 0 -> 0
    x = inp([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0], [0, 0, 0, 0, 1, 1, 1])
    got = adv("pass_at_k_analytic", x, k=2)[:, 0]
    torch.testing.assert_close(got, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0]))


def test_analytic_k1_is_grpo_with_the_population_std():
    # k = 1: R = p (the group's accuracy), sigma = sqrt(p (1 - p)) = the population std of 0/1 scores,
    # A_correct = (1 - p)/sigma, A_wrong = -p/sigma: GRPO's (s - mean) / std with the population std
    gen = torch.Generator().manual_seed(0)
    scores = (torch.rand(24, generator=gen) < 0.4).float()
    gids = torch.arange(4).repeat_interleave(6)
    x = AdvantageInputs(scores, torch.ones(24, 3, dtype=torch.bool), gids, torch.zeros(24, 3))
    got = adv("pass_at_k_analytic", x, k=1)[:, 0]
    want = torch.zeros(24)
    for g in range(4):
        s = scores[gids == g]
        sd = s.std(unbiased=False)
        want[gids == g] = (s - s.mean()) / sd if sd > 0 else 0.0
    torch.testing.assert_close(got, want)
    assert float(got.abs().sum()) > 0


def test_analytic_k_larger_than_group_is_clamped_and_nan_row_left_out():
    # N = 3 valid (the NaN row is left out), 1 correct, k = 8 -> k = 3: R = 1 - C(2,3)/C(3,3) = 1, sigma 0 -> 0
    # (every subset is the whole group, which passes)
    x = inp([1.0, 0.0, 0.0, NAN], [0, 0, 0, 0])
    got = adv("pass_at_k_analytic", x, k=8)
    assert torch.isnan(got[3]).all() and torch.equal(got[:3], torch.zeros(3, 2))
