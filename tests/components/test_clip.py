"""Clip rules: cases C4, C5, C7 and the padding/equivalence properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.components.aggregate import token_mean
from zoo.components.clip.ppo import cispo, clip_fractions, clip_higher, dual_clip, gspo, no_clip, ppo
from zoo.core.registry import ComponentError, available, build
from zoo.core.types import ClipResult, StepCounts

ATOL = 1e-6
RULES = {
    "ppo": ppo,
    "clip_higher": clip_higher,
    "dual_clip": dual_clip,
    "gspo": gspo,
    "cispo": cispo,
    "none": no_clip,
}


def _t(x, **kw):
    return torch.tensor(x, dtype=torch.float64, **kw)


def _leaf(x):
    return _t(x).requires_grad_(True)


def test_all_rules_registered():
    assert set(RULES) <= set(available("clip"))
    for name, fn in RULES.items():
        assert build("clip", name).entry.fn is fn


# ---------------------------------------------------------------- C4 frozen old log-probs
@pytest.mark.parametrize("adv, expected, grad_zero", [(1.0, -1.2, True), (-1.0, 1.648721, False)])
def test_c4_ratio_against_rollout_logprobs(adv, expected, grad_zero):
    logp = _leaf([[-0.5]])
    res = ppo(logp, _t([[-1.0]]), _t([[adv]]), _t([[1.0]]), eps=0.2)
    assert res.ratio.item() == pytest.approx(math.exp(0.5), abs=ATOL)
    assert res.loss.item() == pytest.approx(expected, abs=ATOL)
    res.loss.sum().backward()
    assert (logp.grad.abs().item() == 0.0) == grad_zero
    assert res.clip_high.item() == (adv > 0)  # clipped at 1 + eps, gradient removed
    assert not res.clip_low.item()


def test_ppo_old_logp_is_detached():
    """Old log-probs carry no gradient even if the caller forgot to detach them (C4)."""
    logp = _leaf([[-0.5]])
    old = _leaf([[-0.6]])
    ppo(logp, old, _t([[1.0]]), _t([[1.0]])).loss.sum().backward()
    assert old.grad is None
    assert logp.grad is not None


# ---------------------------------------------------------------- C5 dual clip
def _ratio_loss(fn, ratio, adv, **kw):
    """Loss and d loss / d ratio, driving the ratio through logp with logp_old = 0."""
    r = _t(ratio)
    logp = torch.log(r).unsqueeze(0).requires_grad_(True)  # [1, T]
    res = fn(logp, torch.zeros_like(logp), _t(adv).unsqueeze(0), torch.ones_like(logp), **kw)
    res.loss.sum().backward()
    return res.loss.detach()[0], logp.grad[0] / r  # d/d logp = ratio * d/d ratio


def test_c5_dual_clip_values():
    loss, _ = _ratio_loss(dual_clip, [10.0, 10.0, 0.5, 1.1], [-1.0, 1.0, -1.0, 1.0], eps_low=0.2, c=3.0)
    torch.testing.assert_close(loss, _t([3.0, -1.2, 0.8, -1.1]), atol=ATOL, rtol=0)


def test_c5_dual_clip_gradient():
    loss, dr = _ratio_loss(dual_clip, [1.0, 1.1, 10.0], [1.0, 1.0, -1.0], eps_low=0.2, c=3.0)
    torch.testing.assert_close(loss, _t([-1.0, -1.1, 3.0]), atol=ATOL, rtol=0)
    torch.testing.assert_close(dr, _t([-1.0, -1.0, 0.0]), atol=ATOL, rtol=0)


@pytest.mark.parametrize("c", [1.0, 0.5, -2.0])
def test_c5_dual_clip_c_must_exceed_one(c):
    with pytest.raises(ComponentError, match="c must be > 1"):
        build("clip", {"name": "dual_clip", "c": c})
    with pytest.raises(ValueError, match="c must be > 1"):
        dual_clip(_t([[0.0]]), _t([[0.0]]), _t([[1.0]]), _t([[1.0]]), c=c)


# ---------------------------------------------------------------- C7 garbage in padding
def test_c7_nan_old_logprob_in_padding():
    logp = _leaf([[0.0, 0.0]])
    mask = _t([[1.0, 0.0]])
    res = ppo(logp, _t([[0.0, float("nan")]]), _t([[1.0, 1.0]]), mask, eps=0.2)
    loss = token_mean(res.loss, mask, StepCounts.of(mask))
    assert loss.item() == pytest.approx(-1.0, abs=ATOL)
    loss.backward()
    assert torch.isfinite(logp.grad).all()
    torch.testing.assert_close(logp.grad, _t([[-1.0, 0.0]]), atol=ATOL, rtol=0)
    assert res.loss[0, 1].item() == 0.0 and res.ratio[0, 1].item() == 1.0


GARBAGE = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 123.0])


@st.composite
def padded_batch(draw):
    n = draw(st.integers(1, 3))
    t = draw(st.integers(1, 4))
    real = st.floats(-2.0, 0.0, allow_nan=False)
    logp = [[draw(real) for _ in range(t)] for _ in range(n)]
    old = [[lp + draw(st.floats(-0.5, 0.5)) for lp in row] for row in logp]
    adv = [[draw(st.floats(-2.0, 2.0)) for _ in range(t)] for _ in range(n)]
    lengths = [draw(st.integers(0, t)) for _ in range(n)]
    mask = [[1.0 if j < L else 0.0 for j in range(t)] for L in lengths]
    return _t(logp), _t(old), _t(adv), _t(mask)


def _fill_padding(x, mask, value):
    return torch.where(mask.bool(), x, torch.full_like(x, value))


def _loss_and_grad(fn, logp, old, adv, mask):
    leaf = logp.clone().requires_grad_(True)
    res = fn(leaf, old, adv, mask)
    total = token_mean(res.loss, mask, StepCounts.of(mask))
    total.backward()
    return res, total.detach(), leaf.grad


@pytest.mark.parametrize("name", sorted(RULES))
@settings(max_examples=25, deadline=None)
@given(batch=padded_batch(), g_logp=GARBAGE, g_old=GARBAGE, g_adv=GARBAGE)
def test_padding_never_reaches_loss_or_grad(name, batch, g_logp, g_old, g_adv):
    fn = RULES[name]
    logp, old, adv, mask = batch
    ref, ref_total, ref_grad = _loss_and_grad(fn, logp, old, adv, mask)
    res, total, grad = _loss_and_grad(
        fn,
        _fill_padding(logp, mask, g_logp),
        _fill_padding(old, mask, g_old),
        _fill_padding(adv, mask, g_adv),
        mask,
    )
    assert torch.isfinite(res.loss).all() and torch.isfinite(total) and torch.isfinite(grad).all()
    torch.testing.assert_close(res.loss, ref.loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=0)
    pad = ~mask.bool()
    assert (res.loss[pad] == 0).all() and (grad[pad] == 0).all() and (res.ratio[pad] == 1).all()
    assert not res.clip_low[pad].any() and not res.clip_high[pad].any()


# ---------------------------------------------------------------- equivalences and properties
@settings(max_examples=40, deadline=None)
@given(batch=padded_batch(), eps=st.floats(0.01, 0.5))
def test_clip_higher_with_equal_eps_is_ppo(batch, eps):
    logp, old, adv, mask = batch
    a, _, ga = _loss_and_grad(lambda *x: ppo(*x, eps=eps), logp, old, adv, mask)
    b, _, gb = _loss_and_grad(lambda *x: clip_higher(*x, eps_low=eps, eps_high=eps), logp, old, adv, mask)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-12, rtol=0)
    torch.testing.assert_close(ga, gb, atol=1e-12, rtol=0)
    assert torch.equal(a.clip_low, b.clip_low) and torch.equal(a.clip_high, b.clip_high)


@settings(max_examples=40, deadline=None)
@given(batch=padded_batch(), c=st.floats(1.01, 5.0))
def test_dual_clip_bounds_negative_advantages_only(batch, c):
    logp, old, adv, mask = batch
    logp = logp + 3.0 * (torch.rand_like(logp) - 0.5)  # ratios well outside the clip range too
    p = ppo(logp, old, adv, mask).loss
    d = dual_clip(logp, old, adv, mask, c=c).loss
    pos = adv >= 0
    torch.testing.assert_close(d[pos], p[pos], atol=1e-12, rtol=0)
    assert (d <= p + 1e-12).all()
    assert (d[~pos] <= -c * adv[~pos] + 1e-12).all()


def test_none_is_reinforce_at_ratio_one():
    logp = _leaf([[-0.3, -1.2], [-0.7, -0.1]])
    adv = _t([[0.5, 0.5], [-2.0, -2.0]])
    res = no_clip(logp, logp.detach(), adv, torch.ones_like(adv))
    torch.testing.assert_close(res.loss.detach(), -adv, atol=ATOL, rtol=0)
    res.loss.sum().backward()
    torch.testing.assert_close(logp.grad, -adv, atol=ATOL, rtol=0)  # -A d logp
    assert not res.clip_low.any() and not res.clip_high.any()


def test_clip_flags_and_fractions_ignore_padding():
    # ratios e^0.5 (A>0: clipped high), e^-0.5 (A<0: clipped low), 1 (A>0: not clipped), padding
    logp = _t([[0.5, -0.5, 0.0, 9.0]])
    mask = _t([[1.0, 1.0, 1.0, 0.0]])
    res = ppo(logp, torch.zeros_like(logp), _t([[1.0, -1.0, 1.0, 1.0]]), mask)
    assert res.clip_high.tolist() == [[True, False, False, False]]
    assert res.clip_low.tolist() == [[False, True, False, False]]
    fr = clip_fractions(res, mask)
    assert fr == {"clip/low_frac": pytest.approx(1 / 3), "clip/high_frac": pytest.approx(1 / 3)}
    empty = ClipResult(res.loss, res.clip_low, res.clip_high, res.ratio)
    assert clip_fractions(empty, torch.zeros_like(mask)) == {"clip/low_frac": 0.0, "clip/high_frac": 0.0}


@pytest.mark.parametrize(
    "spec",
    [
        {"name": "clip_higher", "eps_low": 0.3, "eps_high": 0.2},
        {"name": "clip_higher", "eps_low": 0.0},
        {"name": "ppo", "eps": 0.0},
        {"name": "gspo", "eps_low": 5e-4, "eps_high": 4e-4},
        {"name": "cispo", "eps_high": 0.0},
        {"name": "cispo", "eps_low": -1.0},
        {"name": "dual_clip", "eps_low": 0.2, "eps_high": 0.1},
        {"name": "ppo", "eps": float("inf")},  # no clipping is clip 'none', not an infinite eps
        {"name": "clip_higher", "eps_low": 0.2, "eps_high": float("nan")},
    ],
)
def test_bad_hyperparameters_rejected(spec):
    with pytest.raises(ComponentError):
        build("clip", spec)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape mismatch"):
        ppo(_t([[0.0, 0.0]]), _t([[0.0]]), _t([[1.0, 1.0]]), _t([[1.0, 1.0]]))


# ---------------------------------------------------------------- GSPO
def test_gspo_hand_worked():
    # row 0: log-ratios [0.001, -0.0006] + padding -> mean 2e-4, s = e^2e-4 inside [1-3e-4, 1+4e-4]
    # row 1: log-ratios 0.001 x3 -> s = e^0.001 > 1.0004, A = +1 -> clipped high, loss -1.0004
    # row 2: log-ratio -0.001 -> s = e^-0.001 < 0.9997, A = -1 -> clipped low, loss 0.9997
    delta = _t([[0.001, -0.0006, 5.0], [0.001, 0.001, 0.001], [-0.001, 7.0, 7.0]])
    mask = _t([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    adv = _t([[2.0, 2.0, 9.0], [1.0, 1.0, 1.0], [-1.0, 3.0, 3.0]])
    logp = (-1.0 + delta).requires_grad_(True)
    res = gspo(logp, torch.full_like(delta, -1.0), adv, mask)
    s0 = math.exp(2e-4)
    expected = _t([[-2 * s0] * 2 + [0.0], [-1.0004] * 3, [0.9997, 0.0, 0.0]])
    torch.testing.assert_close(res.loss.detach(), expected, atol=ATOL, rtol=0)
    assert res.clip_high.tolist() == [[False] * 3, [True] * 3, [False] * 3]
    assert res.clip_low.tolist() == [[False] * 3, [False] * 3, [True, False, False]]
    torch.testing.assert_close(res.ratio[0], _t([s0, s0, 1.0]), atol=ATOL, rtol=0)
    # seq_mean_token_mean of the per-token loss is the GSPO objective's row loss: d/d logp_t = -A s / |o|
    row_losses = (res.loss * mask).sum(-1) / mask.sum(-1)
    row_losses.sum().backward()
    torch.testing.assert_close(logp.grad[0], _t([-2 * s0 / 2, -2 * s0 / 2, 0.0]), atol=ATOL, rtol=0)
    assert (logp.grad[1:] == 0).all()  # clipped rows carry no gradient


def test_gspo_uses_sequence_mean_of_advantage():
    mask = _t([[1.0, 1.0, 1.0]])
    logp = torch.zeros(1, 3, dtype=torch.float64)
    res = gspo(logp, logp, _t([[1.0, 2.0, 3.0]]), mask)
    torch.testing.assert_close(res.loss, _t([[-2.0, -2.0, -2.0]]), atol=ATOL, rtol=0)


# ---------------------------------------------------------------- CISPO
def test_cispo_keeps_every_gradient():
    # ratios e^1 (far above 1+eps_high), e^-2 (far below), 1.0; no lower bound by default
    logp = _leaf([[1.0, -2.0, 0.0]])
    adv = _t([[1.0, -1.0, 0.5]])
    res = cispo(logp, torch.zeros_like(logp), adv, torch.ones_like(adv))
    w = _t([1.28, math.exp(-2.0), 1.0])
    torch.testing.assert_close(res.loss.detach()[0], -w * adv[0] * logp.detach()[0], atol=ATOL, rtol=0)
    res.loss.sum().backward()
    torch.testing.assert_close(logp.grad[0], -w * adv[0], atol=ATOL, rtol=0)
    assert (logp.grad != 0).all()
    assert res.clip_high.tolist() == [[True, False, False]]
    assert not res.clip_low.any()


def test_cispo_lower_bound_when_set():
    logp = _leaf([[-2.0]])
    res = cispo(logp, _t([[0.0]]), _t([[-1.0]]), _t([[1.0]]), eps_low=0.2, eps_high=0.28)
    res.loss.sum().backward()
    assert logp.grad.item() == pytest.approx(0.8, abs=ATOL)  # -w A with w = 1 - 0.2
    assert res.clip_low.item()


def test_dual_clip_eps_sets_both_sides_and_conflicts_are_errors():
    from zoo.core.registry import ComponentError

    ratio = torch.tensor([[10.0, 10.0, 0.5, 1.1]])
    adv = torch.tensor([[-1.0, 1.0, -1.0, 1.0]])
    logp = ratio.log()
    mask = torch.ones_like(ratio, dtype=torch.bool)
    res = build("clip", {"name": "dual_clip", "eps": 0.2, "c": 3.0})(logp, torch.zeros_like(logp), adv, mask)
    assert res.loss.tolist()[0] == pytest.approx([3.0, -1.2, 0.8, -1.1], abs=1e-6)  # case C5
    with pytest.raises(ComponentError, match="either eps or eps_low"):
        build("clip", {"name": "dual_clip", "eps": 0.2, "eps_low": 0.1})


@pytest.mark.parametrize("spec", [{"name": "ppo", "eps": 5}, {"name": "clip_higher", "eps_low": 1.0, "eps_high": 2.0}])
def test_a_lower_bound_at_or_below_zero_is_refused(spec):
    """eps 5 puts the lower bound 1 - eps at -4: no ratio (> 0) reaches it, the clip acts on one side only."""
    from zoo.core.registry import ComponentError, build

    with pytest.raises(ComponentError, match=r"must be < 1: the lower clip bound"):
        build("clip", spec)
