"""Advantage estimators: hand-worked cases (C8, C14) and properties (padding, row order, NaN rows)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.components.advantage.base import reward_to_go, sequence_scores, token_rewards
from zoo.core.declarations import Declaration
from zoo.core.registry import ComponentError, available, build
from zoo.core.types import AdvantageInputs

NAN = float("nan")
ESTIMATORS = ["gae", "group_mean", "rloo", "reinforce", "reinforce_pp", "pass_at_k", "pass_at_k_analytic"]


def inputs(scores, mask, group_ids=None, kl=None, values=None):
    mask = torch.as_tensor(mask, dtype=torch.bool)
    n = mask.shape[0]
    return AdvantageInputs(
        scores=torch.as_tensor(scores, dtype=torch.float32),
        mask=mask,
        group_ids=torch.as_tensor(group_ids if group_ids is not None else [0] * n),
        kl_reward=torch.zeros(mask.shape) if kl is None else torch.as_tensor(kl, dtype=torch.float32),
        values=None if values is None else torch.as_tensor(values, dtype=torch.float32),
    )


def random_inputs(seed, n_groups=3, g=4, t=6):
    gen = torch.Generator().manual_seed(seed)
    n = n_groups * g
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]  # [N, T]
    scores = torch.randint(0, 3, (n,), generator=gen).float() + torch.rand(n, generator=gen)
    kl = torch.where(mask, -0.1 * torch.rand(n, t, generator=gen), torch.zeros(n, t))
    values = torch.where(mask, torch.randn(n, t, generator=gen), torch.zeros(n, t))
    gids = torch.arange(n_groups).repeat_interleave(g) * 7 - 3  # arbitrary id values
    return AdvantageInputs(scores, mask, gids, kl, values)


def run(name, inp, **params):
    return build("advantage", {"name": name, **params})(inp)


# ---- C14: GAE, score on the last *real* token --------------------------------------------------


def test_c14_gae():
    inp = inputs([1.0], [[1, 1, 0]], kl=[[0.0, 0.0, 0.0]], values=[[0.0, 0.0, 0.0]])
    res = run("gae", inp, gamma=1.0, lam=0.95)
    torch.testing.assert_close(res.advantages, torch.tensor([[0.95, 1.0, 0.0]]))
    torch.testing.assert_close(res.returns, torch.tensor([[0.95, 1.0, 0.0]]))


def test_gae_hand_worked_with_values_kl_and_garbage_padding():
    # row 0: r = [-0.1, 0, 0.2 + 1.0], V = [0.5, 0.2, -0.1], gamma 0.9, lam 0.5
    # delta = [-0.1 + 0.9*0.2 - 0.5, 0 + 0.9*(-0.1) - 0.2, 1.2 - (-0.1)] = [-0.42, -0.29, 1.3]
    # A2 = 1.3; A1 = -0.29 + 0.45*1.3 = 0.295; A0 = -0.42 + 0.45*0.295 = -0.28725
    # row 1 is C14 (gamma 0.9, lam 0.5): r = [0, 1], V = 0 -> A = [0.45, 1.0]
    inp = inputs(
        [1.0, 1.0],
        [[1, 1, 1, 0], [1, 1, 0, 0]],
        kl=[[-0.1, 0.0, 0.2, NAN], [0.0, 0.0, math.inf, NAN]],
        values=[[0.5, 0.2, -0.1, NAN], [0.0, 0.0, 1e30, -math.inf]],
    )
    res = run("gae", inp, gamma=0.9, lam=0.5)
    torch.testing.assert_close(res.advantages, torch.tensor([[-0.28725, 0.295, 1.3, 0.0], [0.45, 1.0, 0.0, 0.0]]))
    torch.testing.assert_close(res.returns, torch.tensor([[0.21275, 0.495, 1.2, 0.0], [0.45, 1.0, 0.0, 0.0]]))


def test_gae_requires_values():
    with pytest.raises(ValueError, match="values"):
        run("gae", inputs([1.0], [[1, 1]]))


def test_token_rewards_score_on_last_real_token():
    kl = [[-0.5, -0.5, NAN], [-0.5, -0.5, -0.5], [NAN, math.inf, 1.0]]
    inp = inputs([2.0, 3.0, 5.0], [[1, 1, 0], [1, 1, 1], [0, 0, 0]], kl=kl)
    torch.testing.assert_close(token_rewards(inp), torch.tensor([[-0.5, 1.5, 0.0], [-0.5, -0.5, 2.5], [0.0, 0.0, 0.0]]))


# ---- C8: reward-to-go ---------------------------------------------------------------------------


@pytest.mark.parametrize("pad", [2.0, NAN, math.inf, -1e30])
def test_c8_reward_to_go_padding_does_not_leak(pad):
    r = torch.tensor([[1.5, 1.0, pad, pad]])
    mask = torch.tensor([[1, 1, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(reward_to_go(r, mask, 1.0), torch.tensor([[2.5, 1.0, 0.0, 0.0]]))


def test_reward_to_go_discounted():
    r = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    # [1 + 0.5*(2 + 0.5*3), 2 + 0.5*3, 3]
    torch.testing.assert_close(reward_to_go(r, mask, 0.5), torch.tensor([[2.75, 3.5, 3.0]]))
    with pytest.raises(ValueError, match="gamma"):
        reward_to_go(r, mask, 1.5)


def test_reinforce_and_reinforce_pp_kl_shaped_reward_to_go():
    # beta 0.1, KL = [1, 2, 3] -> kl_reward = [-0.1, -0.2, -0.3]; score 1
    # REINFORCE++ eq. 9: A_t = 1 - 0.1 * sum_{i>=t} KL(i) = [1 - 0.6, 1 - 0.5, 1 - 0.3]
    inp = inputs([1.0], [[1, 1, 1, 0]], kl=[[-0.1, -0.2, -0.3, NAN]])
    for name in ("reinforce", "reinforce_pp"):
        res = run(name, inp)
        torch.testing.assert_close(res.advantages, torch.tensor([[0.4, 0.5, 0.7, 0.0]]))
        assert res.returns is None
    assert build("advantage", "reinforce_pp").decl.reads == ("kl_reward",)


# ---- sequence-level estimators ------------------------------------------------------------------


def test_group_mean_adds_summed_kl_before_baseline():
    # s = [1 - 0.2, 0 - 0.2] = [0.8, -0.2]; mean 0.3 -> [0.5, -0.5] on real tokens only
    inp = inputs([1.0, 0.0], [[1, 1, 0], [1, 0, 0]], kl=[[-0.1, -0.1, NAN], [-0.2, math.inf, NAN]])
    torch.testing.assert_close(sequence_scores(inp), torch.tensor([0.8, -0.2]))
    res = run("group_mean", inp)
    torch.testing.assert_close(res.advantages, torch.tensor([[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0]]))
    assert res.returns is None


def test_group_mean_equal_scores_give_exactly_zero():
    # three float32 copies of 0.9 have a rounded mean 6e-8 away from 0.9: still exactly 0
    inp = inputs([0.9, 0.9, 0.9, 1.0, 0.0], [[1, 1]] * 5, group_ids=[4, 4, 4, 1, 1])
    adv = run("group_mean", inp).advantages
    assert torch.equal(adv[:3], torch.zeros(3, 2))
    torch.testing.assert_close(adv[3:], torch.tensor([[0.5, 0.5], [-0.5, -0.5]]))


def test_rloo_hand_worked():
    # [1, 0, 0.5]: others' means [0.25, 0.75, 0.5] -> [0.75, -0.75, 0]
    # [1, NaN, 0]: two valid -> [1, NaN, -1];  [NaN, 3]: one valid -> [NaN, 0];  [7]: alone -> 0
    inp = inputs(
        [1.0, 0.0, 0.5, 1.0, NAN, 0.0, NAN, 3.0, 7.0],
        [[1]] * 9,
        group_ids=[0, 0, 0, 1, 1, 1, 2, 2, 3],
    )
    adv = run("rloo", inp).advantages[:, 0]
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.75, 0.0, 1.0, NAN, -1.0, NAN, 0.0, 0.0]), equal_nan=True)


@given(st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_rloo_is_g_over_g_minus_1_times_group_mean(seed):
    inp = random_inputs(seed, n_groups=3, g=4)
    gm = run("group_mean", inp).advantages
    torch.testing.assert_close(run("rloo", inp).advantages, gm * 4 / 3)


# ---- properties shared by all estimators --------------------------------------------------------


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("pad", [NAN, math.inf, -math.inf, 1e30])
def test_padding_content_is_irrelevant(name, pad):
    for seed in range(5):
        inp = random_inputs(seed)
        dirty = AdvantageInputs(
            inp.scores,
            inp.mask,
            inp.group_ids,
            torch.where(inp.mask, inp.kl_reward, torch.full_like(inp.kl_reward, pad)),
            torch.where(inp.mask, inp.values, torch.full_like(inp.values, pad)),
        )
        clean, got = run(name, inp), run(name, dirty)
        assert torch.isfinite(got.advantages).all()
        assert torch.equal(got.advantages, clean.advantages)
        assert torch.equal(got.advantages[~inp.mask], torch.zeros(int((~inp.mask).sum())))
        if got.returns is not None:
            assert torch.isfinite(got.returns).all() and torch.equal(got.returns, clean.returns)


@pytest.mark.parametrize("name", ESTIMATORS)
@given(seed=st.integers(0, 10_000))
@settings(max_examples=10, deadline=None)
def test_row_order_invariance(name, seed):
    inp = random_inputs(seed)
    perm = torch.randperm(inp.scores.shape[0], generator=torch.Generator().manual_seed(seed))
    shuffled = AdvantageInputs(
        inp.scores[perm], inp.mask[perm], inp.group_ids[perm], inp.kl_reward[perm], inp.values[perm]
    )
    torch.testing.assert_close(run(name, shuffled).advantages, run(name, inp).advantages[perm])


@pytest.mark.parametrize("name", ESTIMATORS)
def test_nan_score_row_is_nan_and_touches_no_other_row(name):
    for seed in range(5):
        inp = random_inputs(seed)
        bad = 5
        scores = inp.scores.clone()
        scores[bad] = NAN
        with_nan = run(name, AdvantageInputs(scores, inp.mask, inp.group_ids, inp.kl_reward, inp.values))
        keep = torch.arange(scores.shape[0]) != bad
        without = run(
            name,
            AdvantageInputs(
                inp.scores[keep], inp.mask[keep], inp.group_ids[keep], inp.kl_reward[keep], inp.values[keep]
            ),
        )
        adv = with_nan.advantages
        assert torch.isnan(adv[bad][inp.mask[bad]]).all()
        assert torch.equal(adv[bad][~inp.mask[bad]], torch.zeros(int((~inp.mask[bad]).sum())))
        torch.testing.assert_close(adv[keep], without.advantages)


# ---- C17: an all-alike group over rows of different lengths gets exactly 0 ----------------------


@pytest.mark.parametrize("name", available("advantage"))
def test_c17_all_alike_groups_are_zero_after_group_std_for_every_estimator(name):
    # scores 0.35 (group 0) and 0.9 (group 1), which float32 cannot represent, on rows of lengths
    # [1, 7, 11] and [2, 3, 6]: the float32 row means of a token-level advantage differ by 3e-8 to
    # 6e-8 across lengths, and group_std gave reinforce / reinforce_pp 334249.6 and 822486.2 (before).
    # Undiscounted (gamma = lam = 1), no KL, zero values: every estimator gives every row of a group
    # the same advantage, so the group is all alike and must get exactly 0.
    lengths = torch.tensor([1, 7, 11, 2, 3, 6])
    mask = torch.arange(11)[None, :] < lengths[:, None]  # [6, 11]
    inp = AdvantageInputs(
        torch.tensor([0.35] * 3 + [0.9] * 3),
        mask,
        torch.tensor([5, 5, 5, 2, 2, 2]),
        torch.zeros(mask.shape),
        torch.zeros(mask.shape),
        extras={"greedy_score": torch.zeros(6), "otb_energy": torch.ones(mask.shape)},  # remax, otb read these
    )
    hyper = build("advantage", name).entry.hyperparameters()
    adv = run(name, inp, **{k: 1.0 for k in ("gamma", "lam") if k in hyper}).advantages
    out = build("normalizer", "group_std")(adv, mask, inp.group_ids)
    assert torch.equal(out, torch.zeros(6, 11))
    assert out.dtype == adv.dtype


def test_c17_group_std_keeps_mixed_groups():
    # the tolerance does not zero a real spread: token-level rows [0.35] x 1 and [0.9] x 7 in one
    # group: row values 0.35, 0.9 (mean 0.625, std 0.3889087) -> A / (std + 1e-6)
    mask = torch.arange(7)[None, :] < torch.tensor([1, 7])[:, None]
    inp = AdvantageInputs(torch.tensor([0.35, 0.9]), mask, torch.tensor([0, 0]), torch.zeros(mask.shape))
    out = build("normalizer", "group_std")(run("reinforce", inp).advantages, mask, inp.group_ids)
    sd = math.sqrt(2 * 0.275**2) + 1e-6
    torch.testing.assert_close(out[:, 0], torch.tensor([0.35 / sd, 0.9 / sd]))
    assert torch.equal(out[0, 1:], torch.zeros(6))


# ---- configuration checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "gae", "lam": 1.5},
        {"name": "gae", "gamma": -0.1},
        {"name": "gae", "gamma": True},
        {"name": "reinforce", "gamma": 2.0},
        {"name": "reinforce_pp", "gamma": "1"},
        {"name": "group_mean", "eps": 1e-6},
    ],
)
def test_bad_parameters_rejected(spec):
    with pytest.raises(ComponentError):
        build("advantage", spec)


def test_declarations_and_shape_errors():
    assert build("advantage", "gae").decl == Declaration(reads=("values",), level="token")
    assert build("advantage", "rloo").decl.level == "sequence"
    assert build("advantage", "group_mean").decl.level == "sequence"
    bad = AdvantageInputs(torch.zeros(2), torch.ones(2, 3, dtype=torch.bool), torch.zeros(3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="group_ids"):
        run("group_mean", bad)


# ---- GAE: decoupled lambda (critic vs actor) and length-adaptive lambda (VAPO arXiv 2504.05118) --


def test_gae_defaults_keep_one_lambda():
    # critic_lam None and length_alpha None: the returns are A + V with the actor's lambda (today's GAE),
    # and stating critic_lam = lam gives the same numbers
    for seed in range(3):
        x = random_inputs(seed)
        a, b = run("gae", x, gamma=0.9, lam=0.7), run("gae", x, gamma=0.9, lam=0.7, critic_lam=0.7)
        assert torch.equal(a.advantages, b.advantages) and torch.equal(a.returns, b.returns)
        torch.testing.assert_close(a.returns, torch.where(x.mask, a.advantages + x.values, torch.zeros_like(x.values)))


def test_gae_decoupled_lambda_hand_worked():
    # r = [0, 0, 1], V = [0.5, 0.2, -0.1], gamma 1: delta = [0.2 - 0.5, -0.1 - 0.2, 1 + 0.1] = [-0.3, -0.3, 1.1]
    # actor lam 0.5: A2 = 1.1, A1 = -0.3 + 0.55 = 0.25, A0 = -0.3 + 0.125 = -0.175
    # critic lam 1: A^1_t + V_t telescopes to the Monte-Carlo return, 1 on every token
    x = inputs([1.0], [[1, 1, 1, 0]], values=[[0.5, 0.2, -0.1, NAN]])
    res = run("gae", x, gamma=1.0, lam=0.5, critic_lam=1.0)
    torch.testing.assert_close(res.advantages, torch.tensor([[-0.175, 0.25, 1.1, 0.0]]))
    torch.testing.assert_close(res.returns, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))


def test_length_adaptive_lambda_values():
    from zoo.components.advantage.base import length_adaptive_lambda

    # 1 - 1/(0.05 l): l = 40 -> 0.5, l = 100 -> 0.8, l = 10 -> -1 -> clamped 0, l = 20 -> 0, l = 0 -> 0
    got = length_adaptive_lambda(torch.tensor([40, 100, 10, 20, 0]), 0.05)
    torch.testing.assert_close(got, torch.tensor([0.5, 0.8, 0.0, 0.0, 0.0], dtype=torch.float64))


def test_gae_length_adaptive_lambda_hand_worked():
    # V = 0, gamma 1, score 1: delta is 1 on the last real token, 0 elsewhere, so A_t = lam^(l-1-t).
    # row 0 (l = 40): lam = 0.5 -> A_t = 0.5^(39 - t); row 1 (l = 10): lam = 0 -> A = 1 on the last token only.
    # critic_lam 1: returns = the Monte-Carlo return 1 on every real token of both rows.
    lengths = torch.tensor([40, 10])
    mask = torch.arange(40)[None, :] < lengths[:, None]
    x = AdvantageInputs(torch.ones(2), mask, torch.zeros(2), torch.zeros(2, 40), torch.zeros(2, 40))
    res = run("gae", x, gamma=1.0, lam=0.95, critic_lam=1.0, length_alpha=0.05)
    want0 = 0.5 ** (39 - torch.arange(40, dtype=torch.float32))
    want1 = torch.zeros(40)
    want1[9] = 1.0
    torch.testing.assert_close(res.advantages, torch.stack([want0, want1]))
    torch.testing.assert_close(res.returns, mask.float())


@pytest.mark.parametrize(
    "spec",
    [{"critic_lam": 1.5}, {"critic_lam": -0.1}, {"length_alpha": 0}, {"length_alpha": -0.05}, {"length_alpha": True}],
)
def test_gae_bad_decoupled_or_adaptive_parameters(spec):
    with pytest.raises(ComponentError):
        build("advantage", {"name": "gae", **spec})


@pytest.mark.parametrize("pad", [NAN, math.inf, 1e30])
def test_gae_decoupled_and_length_adaptive_ignore_padding(pad):
    for seed in range(3):
        x = random_inputs(seed)
        dirty = AdvantageInputs(
            x.scores,
            x.mask,
            x.group_ids,
            torch.where(x.mask, x.kl_reward, torch.full_like(x.kl_reward, pad)),
            torch.where(x.mask, x.values, torch.full_like(x.values, pad)),
        )
        params = dict(gamma=1.0, lam=0.95, critic_lam=1.0, length_alpha=0.5)  # l in 1..6: lambda 0 .. 2/3
        a, b = run("gae", x, **params), run("gae", dirty, **params)
        assert torch.isfinite(b.advantages).all() and torch.isfinite(b.returns).all()
        assert torch.equal(a.advantages, b.advantages) and torch.equal(a.returns, b.returns)
