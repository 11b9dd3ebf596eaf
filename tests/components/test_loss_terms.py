"""The loss as terms: the kl: slot desugared into the `kl` loss term / the
kl_reward stage / the `adaptive_kl` controller, the entropy bonus as a loss term, own aggregation,
corrections, and the errors for what users may not write."""

import math

import pytest
import torch
from test_engine import make_batch, settings

from zoo import StepCounts, TermInputs, TermResult
from zoo.config.variant import VariantError, load_variant
from zoo.core import registry
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.types import Models, Slots
from zoo.step.update import update


def test_kl_slot_becomes_the_kl_term_or_the_reward_stage_and_a_controller():
    grpo = Slots.of(load_variant("grpo"))  # kl: {placement: loss, estimator: k3, beta: 0.04}
    assert [t.spec() for t in grpo.loss] == [{"name": "kl", "estimator": "k3", "beta": 0.04, "bias_correction": False}]
    assert grpo.kl_reward is None and grpo.controllers == [] and grpo.reads("logp_ref")
    ppo = Slots.of(load_variant("ppo", {"kl.adaptive": {"target": 6.0, "horizon": 100}}))  # k1 in the reward
    assert ppo.loss == [] and ppo.kl_reward.estimator.name == "k1" and ppo.reads("logp_ref") and ppo.reads("logp_old")
    assert [c.spec() for c in ppo.controllers] == [{"name": "adaptive_kl", "target": 6.0, "horizon": 100, "beta": 0.05}]
    dapo = Slots.of(load_variant("dapo"))  # kl: none -> no reference needed
    assert dapo.loss == [] and dapo.kl_reward is None and not dapo.reads("logp_ref")


@pytest.mark.parametrize("slot,name", [("loss", "kl"), ("controllers", "adaptive_kl")])
def test_writing_kl_or_adaptive_kl_by_hand_is_an_error(slot, name):
    with pytest.raises(
        VariantError, match=rf"grpo.yaml \(overrides\)|grpo.yaml: key 'slots.{slot}': '{name}' comes from the kl: slot"
    ):
        load_variant("grpo", {slot: [{"name": name}]})
    with pytest.raises(VariantError, match=rf"key 'slots.{slot}': '{name}' comes from the kl: slot"):
        load_variant("grpo", {slot: [name]})


def test_entropy_coef_is_an_error_that_names_the_loss_term(tmp_path):
    p = tmp_path / "v.yaml"
    p.write_text("name: v\nbase: grpo\nentropy_coef: 0.01\n")
    with pytest.raises(
        VariantError,
        match=r"v.yaml: key 'entropy_coef' was replaced by a loss term: write "
        r"`slots: \{loss: \[\{name: entropy_bonus, coef: 0.01\}\]\}`",
    ):
        load_variant(p)
    with pytest.raises(
        VariantError, match="entropy_coef was replaced by the loss term entropy_bonus: set loss.entropy_bonus.coef"
    ):
        load_variant("grpo", {"entropy_coef": 0.01})


def test_a_list_slot_item_is_addressed_by_name():
    v = load_variant("grpo", {"loss.entropy_bonus.coef": 0.01})
    assert v.slots.loss == [{"name": "entropy_bonus", "coef": 0.01}]
    v2 = load_variant("grpo", {"loss": ["entropy_bonus"], "loss.entropy_bonus.coef": 0.02})
    assert v2.slots.loss == [{"name": "entropy_bonus", "coef": 0.02}]


def test_entropy_bonus_per_token_value():
    ent = torch.tensor([[0.5, 2.0, 9.0]])
    mask = torch.tensor([[True, True, False]])
    inp = TermInputs(
        logp=torch.zeros(1, 3),
        logp_old=torch.zeros(1, 3),
        advantages=torch.zeros(1, 3),
        mask=mask,
        counts=StepCounts.of(mask),
        entropy=ent,
    )
    out = registry.build("loss", {"name": "entropy_bonus", "coef": 0.1})(inp)
    assert out.loss[0].tolist() == pytest.approx([-0.05, -0.2, 0.0])  # padding 0, not -0.9


def _update(variant_sets, seed=0, aggregate="token_mean"):
    model, tok = tiny_model_and_tokenizer(seed=0)
    batch = make_batch(tok, seed=seed)
    slots = Slots.of(load_variant("grpo", {"kl": "none", "aggregate": aggregate, **variant_sets}))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    return update(batch, Models(policy=model, tokenizer=tok, reference=None), slots, settings(micro_batch=2), opt, None)


def test_entropy_bonus_term_adds_minus_coef_times_the_token_mean_entropy():
    base = _update({})
    bonus = _update({"loss": [{"name": "entropy_bonus", "coef": 0.3}]})
    # token_mean aggregation, one optimizer step, ratio 1: the term is -0.3 x the token-mean entropy
    assert bonus["loss/entropy_bonus"] == pytest.approx(-0.3 * bonus["entropy"], rel=1e-5)
    assert bonus["loss/policy"] == pytest.approx(base["loss/policy"] + bonus["loss/entropy_bonus"], rel=1e-5)
    assert bonus["entropy"] == pytest.approx(base["entropy"], rel=1e-6)


@registry.register("loss", "test_const_own_agg", aggregate="token_mean")
def _const_own(inp: TermInputs, *, value: float = 1.0) -> TermResult:
    """A constant per-token loss aggregated with its own rule (token_mean) whatever the variant's."""
    return TermResult(
        torch.where(inp.mask, torch.full_like(inp.logp, value), torch.zeros_like(inp.logp)) + 0 * inp.logp
    )


@registry.register("correction", "test_half")
def _half(inp: TermInputs) -> torch.Tensor:
    return torch.full_like(inp.logp, 0.5)


def test_a_term_with_its_own_aggregation_and_a_correction():
    base = _update({}, aggregate="seq_mean_token_mean")
    own = _update({"loss": [{"name": "test_const_own_agg", "value": 2.0}]}, aggregate="seq_mean_token_mean")
    # token_mean of a constant 2 over real tokens is 2, added to the variant's seq-mean aggregation
    assert own["loss/test_const_own_agg"] == pytest.approx(2.0)
    assert own["loss/policy"] == pytest.approx(base["loss/policy"] + 2.0, rel=1e-5)
    halved = _update({"correction": ["test_half"]}, aggregate="seq_mean_token_mean")
    assert halved["loss/policy"] == pytest.approx(0.5 * base["loss/policy"], rel=1e-5)


def test_adaptive_kl_controller_moves_beta_and_keeps_its_state():
    ctrl = registry.build("controller", {"name": "adaptive_kl", "target": 1.0, "horizon": 10, "beta": 0.1})()
    assert ctrl.coefficients() == {"kl": {"beta": 0.1}}
    ctrl.update({"kl/ref": 0.5}, 4.0, 2.0)  # KL per completion = 0.5 x 4 / 2 = 1.0 = target: no change
    assert ctrl.beta == pytest.approx(0.1)
    ctrl.update({"kl/ref": 1.0}, 6.0, 2.0)  # 3.0 per completion: error clipped to 0.2, x n / horizon = 0.2
    assert ctrl.beta == pytest.approx(0.1 * (1 + 0.2 * 2 / 10))
    again = registry.build("controller", {"name": "adaptive_kl", "target": 1.0, "horizon": 10, "beta": 0.1})()
    again.load_state_dict(ctrl.state_dict())
    assert again.coefficients() == ctrl.coefficients()
    ctrl.update({"kl/ref": math.nan}, 6.0, 2.0)  # no KL measured: unchanged
    assert again.beta == ctrl.beta


def test_kl_settings_on_a_variant_without_kl_are_an_error_not_a_no_op(tmp_path):
    from zoo.checks.variant import check_variant

    rep = check_variant(load_variant("dapo", {"kl.beta": 0.1, "kl.adaptive": {"target": 6.0}}))  # dapo: kl none
    assert any("kl.placement is 'none', so kl.beta / kl.adaptive have no effect" in e for e in rep.errors), rep.errors
    assert check_variant(load_variant("dapo")).ok
    # a child that writes `kl:` replaces the base's whole slot: without a placement that is an error,
    # not a silent "none" that drops grpo's KL
    p = tmp_path / "grpo_akl.yaml"
    p.write_text("name: grpo_akl\nbase: grpo\nslots:\n  kl: {adaptive: {target: 6}}\n")
    with pytest.raises(VariantError, match=r"grpo_akl.yaml: key 'slots.kl.placement': Field required"):
        load_variant(p)
