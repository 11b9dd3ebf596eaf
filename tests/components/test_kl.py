"""KL estimators (C13), the masked application, the in-reward term, placement parsing, adaptive beta."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.components.kl import adaptive_beta, k1, k2, k3, kl_reward, masked_kl
from zoo.core.registry import available, build

ATOL = 1e-6


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


LOGP = _t([-0.5, -1.0, -3.0])
REF = _t([-2.0, -1.0, -1.0])


def test_registered():
    assert available("kl_estimator") == ["k1", "k2", "k3"]


@pytest.mark.parametrize(
    "name, expected",
    [("k1", [1.5, 0.0, -2.0]), ("k2", [1.125, 0.0, 2.0]), ("k3", [0.7231302, 0.0, 4.3890561])],
)
def test_c13_estimators(name, expected):
    out = build("kl_estimator", name)(LOGP[None], REF[None])
    torch.testing.assert_close(out[0], _t(expected), atol=ATOL, rtol=0)


def test_k3_clamps():
    # d = -30 -> clamped to -20 -> exp(20) - 21 -> capped at 10; d = 30 -> 20 -> e^-20 + 19 -> 10
    out = k3(_t([[0.0, 30.0, 1e6, -1e6]]), _t([[30.0, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(out, _t([[10.0, 10.0, 10.0, 10.0]]), atol=0, rtol=0)
    assert torch.isfinite(out).all()


@settings(max_examples=50, deadline=None)
@given(d=st.floats(-50, 50))
def test_k3_nonnegative_and_bounded(d):
    v = k3(_t([[d]]), _t([[0.0]])).item()
    assert -1e-12 <= v <= 10.0
    assert k2(_t([[d]]), _t([[0.0]])).item() >= 0


def test_estimator_gradients():
    logp = LOGP[None].clone().requires_grad_(True)
    k3(logp, REF[None]).sum().backward()
    d = LOGP - REF
    torch.testing.assert_close(logp.grad[0], 1 - torch.exp(-d), atol=ATOL, rtol=0)  # d k3 / d logp


@pytest.mark.parametrize("est", [k1, k2, k3])
@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), -float("inf")])
def test_masked_kl_padding(est, garbage):
    mask = _t([[1, 1, 0]])
    logp = torch.where(mask.bool(), LOGP[None], _t(garbage)).requires_grad_(True)
    ref = torch.where(mask.bool(), REF[None], _t(garbage))
    out = masked_kl(est, logp, ref, mask)
    clean = est(LOGP[None], REF[None])
    torch.testing.assert_close(out[0, :2], clean[0, :2], atol=ATOL, rtol=0)
    assert out[0, 2].item() == 0.0
    out.sum().backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 2].item() == 0.0


def test_kl_reward():
    k = _t([[1.5, float("nan"), 2.0]]).requires_grad_(True)
    r = kl_reward(k, _t([[1, 0, 1]]), 0.05)
    torch.testing.assert_close(r, _t([[-0.075, 0.0, -0.1]]), atol=ATOL, rtol=0)
    assert not r.requires_grad  # a reward carries no gradient
    with pytest.raises(ValueError, match="beta"):
        kl_reward(k, _t([[1, 0, 1]]), -1.0)


# ---------------------------------------------------------------- adaptive controller
def test_adaptive_beta_hand_worked():
    # Ziegler books: beta 0.15, target 6; KL 9 -> error clip(0.5) = 0.2; batch 512, horizon 10000
    assert adaptive_beta(0.15, 9.0, 6.0, 10_000, 512) == pytest.approx(0.15 * (1 + 0.2 * 0.0512), abs=1e-12)
    assert adaptive_beta(0.15, 9.0, 6.0, 10_000, 512) == pytest.approx(0.151536, abs=1e-9)
    # KL 5.4 -> error -0.1 (inside the clip); 1000 episodes -> mult 0.99
    assert adaptive_beta(0.15, 5.4, 6.0, 10_000, 1000) == pytest.approx(0.1485, abs=1e-12)
    # KL 0 -> error clipped at -0.2
    assert adaptive_beta(0.1, 0.0, 6.0, 100, 100) == pytest.approx(0.08, abs=1e-12)
    assert adaptive_beta(0.1, 6.0, 6.0, 100, 100) == pytest.approx(0.1, abs=1e-12)


@pytest.mark.parametrize("kw", [{"target": 0.0}, {"horizon": 0.0}, {"kl": float("nan")}, {"beta": -1.0}])
def test_adaptive_beta_rejects(kw):
    args = {"beta": 0.1, "kl": 1.0, "target": 6.0, "horizon": 10_000, "n_steps": 8, **kw}
    with pytest.raises(ValueError):
        adaptive_beta(**args)


# ---------------------------------------------------------------- placement (the variant's `kl` slot)
def test_kl_slot_parsing():
    from zoo.config.variant import KLSpec, Slots, load_variant

    others = load_variant("grpo").slots.model_dump(exclude={"kl"})  # every slot is required
    assert Slots(**others, kl="none").kl_spec() == KLSpec(placement="none")
    grpo = Slots(**others, kl={"placement": "loss", "estimator": "k3", "beta": 0.04}).kl_spec()
    assert (grpo.placement, grpo.estimator, grpo.beta, grpo.adaptive) == ("loss", "k3", 0.04, None)
    ppo = Slots(
        **others, kl={"placement": "reward", "estimator": "k1", "beta": 0.05, "adaptive": {"target": 6}}
    ).kl_spec()
    assert ppo.adaptive.target == 6.0 and ppo.adaptive.horizon == 10_000


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"placement": "everywhere", "estimator": "k1", "beta": 0.1}, "placement"),
        ({"placement": "loss", "estimator": "k3", "beta": -0.1}, "beta"),
        ({"placement": "loss", "estimator": "k3", "beta": 0.1, "coef": 1}, "coef"),
        ({"placement": "reward", "estimator": "k1", "beta": 0.1, "adaptive": {"target": -1}}, "target"),
    ],
)
def test_kl_slot_rejects(spec, match):
    from pydantic import ValidationError

    from zoo.config.variant import KLSpec

    with pytest.raises(ValidationError, match=match):
        KLSpec.model_validate(spec)


def test_unknown_estimator_lists_close_matches():
    from pydantic import ValidationError

    from zoo.config.variant import KLSpec

    with pytest.raises(ValidationError, match="did you mean 'k3'"):
        KLSpec.model_validate({"placement": "loss", "estimator": "k33", "beta": 0.1})


def test_k3_matches_rho_form():
    rho = torch.exp(REF - LOGP)
    torch.testing.assert_close(k3(LOGP[None], REF[None])[0], rho - 1 - torch.log(rho), atol=ATOL, rtol=0)
    assert math.isclose(k1(_t([[0.0]]), _t([[0.0]])).item(), 0.0)
