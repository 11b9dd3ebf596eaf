"""Full-vocabulary divergences of distillation (zoo/components/loss/distill_divergence.py) by hand on a
two-token vocabulary, and GKD's JSD at its beta limits equal to the forward / reverse KL."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.components.loss.distill_divergence import distill_vocab, forward_kl, generalized_jsd, reverse_kl
from zoo.core import registry
from zoo.core.types import StepCounts, TermInputs

# student S = [0.5, 0.5], teacher T = [0.9, 0.1], as logits
S = torch.log(torch.tensor([[0.5, 0.5]]))
T = torch.log(torch.tensor([[0.9, 0.1]]))
FWD = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)  # KL(T || S) = 0.368064
REV = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)  # KL(S || T) = 0.510826
# JSD(0.5): M = 0.5 T + 0.5 S = [0.7, 0.3]
JSD = 0.5 * (0.9 * math.log(0.9 / 0.7) + 0.1 * math.log(0.1 / 0.3)) + 0.5 * (
    0.5 * math.log(0.5 / 0.7) + 0.5 * math.log(0.5 / 0.3)
)  # 0.101750


def test_by_hand():
    assert float(forward_kl(S, T)) == pytest.approx(FWD, rel=1e-5)
    assert float(reverse_kl(S, T)) == pytest.approx(REV, rel=1e-5)
    assert float(generalized_jsd(S, T, 0.5)) == pytest.approx(JSD, rel=1e-5)
    assert FWD == pytest.approx(0.368064, rel=1e-5) and JSD == pytest.approx(0.101750, rel=1e-4)


def test_jsd_at_its_beta_limits_is_the_forward_and_reverse_kl():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(3, 5, 11, generator=g), torch.randn(3, 5, 11, generator=g) * 2
    assert torch.equal(generalized_jsd(s, t, 0.0), forward_kl(s, t))
    assert torch.equal(generalized_jsd(s, t, 1.0), reverse_kl(s, t))
    # JSD(beta) = beta KL(T || S) + O(beta^2) near 0 and (1 - beta) KL(S || T) + O((1 - beta)^2) near 1 (GKD §3):
    # the relative gap shrinks with eps (measured here: 1e-2 -> 0.08 / 0.16, 1e-4 -> 0.001 / 0.003)
    eps = 1e-4
    assert torch.allclose(generalized_jsd(s, t, eps) / eps, forward_kl(s, t), rtol=5e-3)
    assert torch.allclose(generalized_jsd(s, t, 1 - eps) / eps, reverse_kl(s, t), rtol=5e-3)


def test_teacher_equal_to_student_gives_zero_and_temperature_divides_the_logits():
    s = torch.randn(2, 7)
    for fn in (forward_kl, reverse_kl, lambda a, b: generalized_jsd(a, b, 0.3)):
        assert torch.allclose(fn(s, s.clone()), torch.zeros(2), atol=1e-6)
    t = torch.randn(2, 7)
    assert torch.allclose(reverse_kl(s, t, temperature=2.0), reverse_kl(s / 2, t / 2), rtol=1e-6)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="beta"):
        generalized_jsd(S, T, 1.5)
    with pytest.raises(ValueError, match="differ"):
        forward_kl(S, torch.zeros(1, 3))


def test_the_loss_term_is_the_divergence_on_trained_tokens_only():
    g = torch.Generator().manual_seed(1)
    s = torch.log_softmax(torch.randn(2, 3, 6, generator=g), -1).requires_grad_(True)
    t = torch.log_softmax(torch.randn(2, 5, 6, generator=g), -1)  # the teacher's [N, T_full, V], untrimmed
    mask = torch.tensor([[True, True, False], [True, False, False]])
    z = torch.zeros(2, 3)
    inp = TermInputs(
        logp=z,
        logp_old=z,
        advantages=z,
        mask=mask,
        counts=StepCounts(3.0, 2.0, 3),
        extras={"logp_vocab": s, "logp_teacher_vocab": t},
    )
    res = distill_vocab(inp, divergence="jsd", beta=0.3, coef=2.0)
    want = 2.0 * generalized_jsd(s, t[:, :3], 0.3)
    assert torch.allclose(res.loss[mask], want[mask], rtol=1e-6) and torch.equal(res.loss[~mask], torch.zeros(3))
    res.loss.sum().backward()
    assert s.grad[~mask].abs().sum() == 0 and s.grad[mask].abs().sum() > 0  # no gradient off the mask
    for d, fn in (("reverse_kl", reverse_kl), ("forward_kl", forward_kl)):
        r = distill_vocab(inp, divergence=d).loss.detach()
        assert torch.allclose(r[mask], fn(s, t[:, :3]).detach()[mask], rtol=1e-6)
    with pytest.raises(Exception, match="divergence"):
        registry.build("loss", {"name": "distill_vocab", "divergence": "tv"})
