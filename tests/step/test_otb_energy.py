"""The optimal token baseline's energy, extras["otb_energy"] = 1 - 2 pi_j + sum_v pi_v^2 (zoo.step.forwards):
hand-worked sum_v pi_v^2, the rollout forwards' value against a direct full-softmax computation on the tiny
model (plain and shared-prompt forwards, micro-batched, at a temperature), 0 off the loss mask, and no
forward and no change for a variant that does not read it."""

import math
from dataclasses import replace

import pytest
import torch
from conftest import ForwardRows
from test_engine import LENGTHS, PROMPTS, make_batch, settings, slots_for

from zoo.config.variant import load_variant
from zoo.models.forward import position_ids_from_mask
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.forwards import ENERGY, old_rows, otb_energy, reuses_old, rollout_forwards
from zoo.step.logprobs import _chosen_logprobs
from zoo.step.types import Models, Slots


def _otb_slots() -> Slots:
    """grpo with the `otb` estimator (the registry's `otb` variant sets more; the estimator is what reads)."""
    return Slots.of(load_variant("grpo", {"advantage": "otb", "normalizer": "none", "kl": "none"}))


def _hand(logits, token, temperature=1.0):
    lp, _, sq = _chosen_logprobs(torch.tensor([[logits]]), torch.tensor([[token]]), temperature, False, False, True)
    return float(sq), float(otb_energy(lp, sq))


def test_sum_sq_and_energy_by_hand():
    # logits [0, 0]: pi = [.5, .5], sum pi^2 = .5, energy = 1 - 2 * .5 + .5 = .5
    assert _hand([0.0, 0.0], 0) == pytest.approx((0.5, 0.5), abs=1e-7)
    # logits [ln 3, 0]: pi = [.75, .25], sum pi^2 = .625; token 0: 1 - 1.5 + .625, token 1: 1 - .5 + .625
    assert _hand([math.log(3), 0.0], 0) == pytest.approx((0.625, 0.125), abs=1e-6)
    assert _hand([math.log(3), 0.0], 1) == pytest.approx((0.625, 1.125), abs=1e-6)
    # the sampling temperature divides the logits first: [2 ln 3, 0] at 2 is the case above
    assert _hand([2 * math.log(3), 0.0], 1, temperature=2.0) == pytest.approx((0.625, 1.125), abs=1e-6)
    # a one-hot policy has no energy on its token, 2 on any other (||e_j - pi||^2)
    assert _hand([0.0, 1e4, 0.0], 1) == pytest.approx((1.0, 0.0), abs=1e-6)
    assert _hand([0.0, 1e4, 0.0], 0) == pytest.approx((1.0, 2.0), abs=1e-6)


def _direct(model, batch, temperature):
    """(logp [N, T], energy [N, T]) from one plain forward with the full fp32 softmax, by hand."""
    ids, att = batch.input_ids(), batch.attention_mask()
    T = batch.completion_ids.shape[1]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att)).logits
    pi = torch.softmax(logits[:, -T - 1 : -1].double() / temperature, dim=-1)  # [N, T, V]
    p = pi.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)  # [N, T]
    return p.log(), 1 - 2 * p + (pi * pi).sum(-1)


@pytest.mark.parametrize("micro_batch", [2, 100])
@pytest.mark.parametrize("repeated", [False, True])  # True: a group's prompt runs once (shared-prompt forward)
def test_energy_equals_a_full_softmax_by_hand(micro_batch, repeated):
    model, tok = tiny_model_and_tokenizer(seed=4)
    batch = make_batch(tok, seed=1, lengths=LENGTHS * 2, prompts=PROMPTS * 2) if repeated else make_batch(tok, seed=1)
    s = replace(settings(micro_batch), temperature=0.7)
    out = rollout_forwards(batch, Models(model, tok, None), _otb_slots(), s)
    logp, energy = _direct(model, batch, 0.7)
    m = batch.loss_mask
    got = out.extras[ENERGY]
    assert got.shape == m.shape and got.dtype == torch.float32
    torch.testing.assert_close(got[m].double(), energy[m], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.logp_old[m].double(), logp[m], rtol=1e-5, atol=1e-5)
    assert (got[~m] == 0).all()  # padding: 0, as every [N, T] field off the loss mask
    assert (energy[m] > 0).all() and (energy[m] < 2).all()  # ||e_j - pi||^2 in (0, 2) off one-hot policies


def test_a_variant_that_does_not_read_it_pays_nothing():
    """grpo with one on-policy update runs no old forward and writes no energy; otb runs one over every row
    (it needs the old policy's distribution before the update); their old log-probs are the same numbers."""
    model, tok = tiny_model_and_tokenizer(seed=4)
    batch = make_batch(tok)
    models = Models(model, tok, None)
    grpo, otb = slots_for(), _otb_slots()
    seen = ForwardRows()
    out = rollout_forwards(batch, models, grpo, settings(2), hooks=seen)
    assert seen.rows == [] and out.logp_old is None and ENERGY not in out.extras
    seen = ForwardRows()
    out = rollout_forwards(batch, models, otb, settings(2), hooks=seen)
    assert seen.rows == [("policy", 2), ("policy", 2), ("policy", 1)] and ENERGY in out.extras
    # the first minibatch's old log-probs cannot come from its training forward: the advantage needs them first
    order = torch.arange(batch.size)
    assert reuses_old(grpo, settings(2, minibatches=2)) and not reuses_old(otb, settings(2, minibatches=2))
    assert old_rows(5, otb, settings(2, minibatches=2), order).tolist() == [0, 1, 2, 3, 4]
    # where grpo computes every row's old log-probs (two epochs), otb's are bit-identical
    a = rollout_forwards(batch, models, grpo, settings(2, epochs=2))
    b = rollout_forwards(batch, models, otb, settings(2, epochs=2))
    assert torch.equal(a.logp_old, b.logp_old) and ENERGY not in a.extras
