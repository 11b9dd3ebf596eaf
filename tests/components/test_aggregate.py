"""Aggregators: cases C2, C3, C6 (loss part), C9; step-share property for every aggregator."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.components.aggregate import seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm, token_mean
from zoo.components.clip.ppo import ppo
from zoo.components.stats import masked_mean, masked_sum
from zoo.core.registry import ComponentError, available, build
from zoo.core.types import StepCounts

ATOL = 1e-6
AGGREGATORS = {
    "token_mean": token_mean,
    "seq_mean_token_mean": seq_mean_token_mean,
    "seq_mean_token_sum": seq_mean_token_sum,
    "seq_mean_token_sum_norm": seq_mean_token_sum_norm,
}


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


def test_registered():
    assert set(AGGREGATORS) == set(available("aggregate"))


# ---------------------------------------------------------------- C2
def test_c2_token_mean_spans_the_step():
    counts = StepCounts(tokens=5, sequences=2, max_new_tokens=4)
    mb1 = token_mean(_t([[1.0, 1.0, 1.0, 1.0]]), _t([[1.0, 1.0, 1.0, 1.0]]), counts)
    mb2 = token_mean(_t([[5.0]]), _t([[1.0]]), counts)
    assert (mb1 + mb2).item() == pytest.approx(1.8, abs=ATOL)
    assert (mb1 + mb2).item() != pytest.approx(3.0)  # the mean of micro-batch means


@pytest.mark.parametrize(
    "name, expected",
    [
        ("token_mean", 1.8),
        ("seq_mean_token_mean", 3.0),
        ("seq_mean_token_sum", 4.5),
        ("seq_mean_token_sum_norm", 1.125),
    ],
)
def test_c2_whole_batch_values(name, expected):
    """The C2 data as one padded batch: [[1, 1, 1, 1], [5, pad, pad, pad]], L = 4."""
    loss = _t([[1.0, 1.0, 1.0, 1.0], [5.0, 99.0, float("nan"), float("inf")]])
    mask = _t([[1, 1, 1, 1], [1, 0, 0, 0]])
    assert AGGREGATORS[name](loss, mask, StepCounts.of(mask)).item() == pytest.approx(expected, abs=ATOL)


def test_c2_same_gradient_whatever_the_split():
    w = torch.ones(5, dtype=torch.float64, requires_grad=True)
    x = _t([1.0, 1.0, 1.0, 1.0, 5.0])
    counts = StepCounts(tokens=5, sequences=2, max_new_tokens=4)
    # split A: micro-batches [1,1,1,1] and [5]
    (
        token_mean((w[:4] * x[:4])[None], torch.ones(1, 4), counts)
        + token_mean((w[4:] * x[4:])[None], torch.ones(1, 1), counts)
    ).backward()
    grad_a = w.grad.clone()
    w.grad = None
    # split B: one micro-batch holding both sequences, padded
    loss = torch.stack([w[:4] * x[:4], torch.cat([w[4:] * x[4:], torch.zeros(3, dtype=torch.float64)])])
    token_mean(loss, _t([[1, 1, 1, 1], [1, 0, 0, 0]]), counts).backward()
    torch.testing.assert_close(w.grad, grad_a, atol=1e-12, rtol=0)
    torch.testing.assert_close(grad_a, x / 5, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- C3
def test_c3_no_second_division():
    counts = StepCounts(tokens=4, sequences=2, max_new_tokens=3)
    shares = [token_mean(_t([[1.0, 1.0, 1.0]]), _t([[1, 1, 1]]), counts), token_mean(_t([[3.0]]), _t([[1]]), counts)]
    assert [s.item() for s in shares] == [pytest.approx(0.75), pytest.approx(0.75)]
    assert sum(shares).item() == pytest.approx(1.5, abs=ATOL)


# ---------------------------------------------------------------- C6 (loss part)
def test_c6_loss_ignores_tokens_after_eos():
    mask = _t([[1, 1, 0, 0], [1, 1, 1, 1]])
    adv = _t([[0.7071068] * 4, [-0.7071068] * 4])
    logp = torch.full((2, 4), -0.7, dtype=torch.float64)
    res = ppo(logp, logp, adv, mask)
    loss = token_mean(res.loss, mask, StepCounts.of(mask))
    assert loss.item() == pytest.approx(-(2 * 0.7071068 - 4 * 0.7071068) / 6, abs=ATOL)
    assert loss.item() == pytest.approx(0.2357023, abs=ATOL)
    everything = torch.ones_like(mask)  # counting the trailing EOS tokens: the bug
    wrong = token_mean(ppo(logp, logp, adv, everything).loss, everything, StepCounts.of(everything))
    assert wrong.item() == pytest.approx(0.0, abs=ATOL)


# ---------------------------------------------------------------- C9
def test_c9_logged_means_ignore_padding():
    logp = _t([[-0.5, -0.3, 1.0, 1.0], [-0.2, -0.4, -0.6, -0.8]])
    mask = _t([[1, 1, 0, 0], [1, 1, 1, 1]])
    nll = masked_sum(-logp, mask, dim=-1)
    torch.testing.assert_close(nll, _t([0.8, 2.0]), atol=ATOL, rtol=0)
    assert nll.mean().item() == pytest.approx(1.4, abs=ATOL)
    assert (-logp).sum(-1).mean().item() == pytest.approx(0.4, abs=ATOL)  # the padding-counting bug
    torch.testing.assert_close(masked_mean(-logp, mask, dim=-1), _t([0.4, 0.5]), atol=ATOL, rtol=0)


# ---------------------------------------------------------------- shares sum to the step value
@st.composite
def step(draw):
    n = draw(st.integers(1, 5))
    t = draw(st.integers(1, 5))
    loss = _t([[draw(st.floats(-3, 3)) for _ in range(t)] for _ in range(n)])
    lengths = [draw(st.integers(0, t)) for _ in range(n)]
    mask = _t([[1.0 if j < L else 0.0 for j in range(t)] for L in lengths])
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=3)))) if n > 1 else []
    return loss, mask, [c for c in cuts if c < n]


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
@settings(max_examples=30, deadline=None)
@given(data=step())
def test_micro_batch_shares_sum_to_step_value_and_gradient(name, data):
    fn = AGGREGATORS[name]
    loss, mask, cuts = data
    counts = StepCounts.of(mask, max_new_tokens=7)
    full_leaf = loss.clone().requires_grad_(True)
    full = fn(full_leaf, mask, counts)
    full.backward()
    split_leaf = loss.clone().requires_grad_(True)
    bounds = [0, *cuts, loss.shape[0]]
    total = sum(fn(split_leaf[a:b], mask[a:b], counts) for a, b in zip(bounds, bounds[1:]))
    total.backward()
    assert torch.isfinite(full)
    torch.testing.assert_close(total, full, atol=1e-12, rtol=0)
    torch.testing.assert_close(split_leaf.grad, full_leaf.grad, atol=1e-12, rtol=0)
    assert (full_leaf.grad[mask == 0] == 0).all()


def test_norm_uses_max_new_tokens_or_L():
    loss, mask = _t([[1.0, 2.0, 0.0]]), _t([[1, 1, 0]])
    counts = StepCounts(tokens=2, sequences=1, max_new_tokens=6)
    assert seq_mean_token_sum_norm(loss, mask, counts).item() == pytest.approx(3.0 / 6)
    assert build("aggregate", {"name": "seq_mean_token_sum_norm", "L": 10})(loss, mask, counts).item() == pytest.approx(
        0.3
    )
    with pytest.raises(ComponentError, match="L must be"):
        build("aggregate", {"name": "seq_mean_token_sum_norm", "L": 0})


def test_empty_step_is_zero_not_nan():
    loss, mask = _t([[float("nan")]]), _t([[0.0]])
    for fn in AGGREGATORS.values():
        assert fn(loss, mask, StepCounts(tokens=0, sequences=0, max_new_tokens=1)).item() == 0.0
