"""TRL's bias-corrected KL (`use_bias_correction_kl`): the `kl` term's k3 times pi_theta / pi_old,
with the gradient through the ratio; a loss-only option of the `kl:` slot."""

import math

import pytest
import torch

from zoo.components.loss.base import kl
from zoo.config.desugar import kl_parts
from zoo.config.variant import KLSpec
from zoo.core.types import StepCounts, TermInputs


def _inp(logp, old, ref, mask):
    m = torch.tensor(mask, dtype=torch.bool)
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return TermInputs(t(logp).requires_grad_(True), t(old), torch.zeros(m.shape), m, StepCounts.of(m), logp_ref=t(ref))


def test_hand_case_value_and_gradient():
    # logp -0.5, ref -2: d = 1.5, k3 = e^-1.5 + 0.5 = 0.7231302; pi / pi_old = 2 -> 1.4462604
    # gradient d/dlogp (r k3) = r k3 + r (1 - e^-d) = 1.4462604 + 1.5537396 = 3.0
    inp = _inp([[-0.5, float("nan")]], [[-0.5 - math.log(2), float("inf")]], [[-2.0, float("nan")]], [[1, 0]])
    res = kl(inp, beta=1.0, bias_correction=True)
    (g,) = torch.autograd.grad(res.loss.sum(), inp.logp)
    assert res.loss[0].tolist() == pytest.approx([1.4462604, 0.0], rel=1e-6)
    assert g[0].tolist() == pytest.approx([3.0, 0.0], rel=1e-9)
    assert res.token_stats["kl/ref"][0, 0].item() == pytest.approx(0.7231302, rel=1e-6)  # logged uncorrected
    plain = kl(inp, beta=1.0)
    assert plain.loss[0, 0].item() == pytest.approx(0.7231302, rel=1e-6)


def test_on_policy_the_value_is_k3_but_the_gradient_gains_k3():
    inp = _inp([[-0.5]], [[-0.5]], [[-2.0]], [[1]])
    res = kl(inp, beta=1.0, bias_correction=True)
    (g,) = torch.autograd.grad(res.loss.sum(), inp.logp)
    assert res.loss.item() == pytest.approx(0.7231302, rel=1e-6)
    assert g.item() == pytest.approx(0.7231302 + (1 - math.exp(-1.5)), rel=1e-6)  # TRL: logp_old = logp.detach()


def test_the_slot_option_reaches_the_term_and_is_loss_only():
    parts = kl_parts(KLSpec(placement="loss", beta=0.04, bias_correction=True))
    assert parts.loss_term == {"name": "kl", "estimator": "k3", "beta": 0.04, "bias_correction": True}
    assert "bias_correction" not in kl_parts(KLSpec(placement="loss", beta=0.04)).loss_term  # unchanged default
    with pytest.raises(ValueError, match="placement: loss"):
        KLSpec(placement="reward", beta=0.04, bias_correction=True)
