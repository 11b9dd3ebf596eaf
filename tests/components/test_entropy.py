"""Entropy mechanisms (zoo/components/correction/entropy.py, zoo/components/controllers.py): the high-entropy token selection (arXiv:2506.01939,
TRL's quantile rule) on hand-worked cases and through the update, and Skywork-OR1's adaptive entropy
controller (arXiv:2505.22312 §3.2.4) step by step and through a checkpoint."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from test_engine import make_batch, settings

from zoo import StepCounts, StepView, TermInputs
from zoo.checks.variant import check_variant
from zoo.components.controllers import AdaptiveEntropy
from zoo.components.correction.entropy import linear_quantile, top_entropy_mask
from zoo.config.variant import load_variant
from zoo.core import registry
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.logprobs import token_logprobs
from zoo.step.types import Models, Slots
from zoo.step.update import update

NAN, INF = float("nan"), float("inf")
# two rows, 3 and 2 real tokens; the padded slot of row 1 holds garbage
ENT = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.7, 0.0]])
MASK = torch.tensor([[True, True, True], [True, True, False]])


def test_linear_quantile_is_torch_quantile():
    x = torch.randn(101, generator=torch.Generator().manual_seed(0))
    for q in (0.0, 0.13, 0.5, 0.8, 1.0):
        assert linear_quantile(x, q).item() == pytest.approx(torch.quantile(x, q).item(), abs=1e-6)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        linear_quantile(x, 1.5)


@pytest.mark.parametrize(
    "rho,kept",
    [
        # real entropies sorted: 0.1 0.3 0.5 0.7 0.9 (n = 5), threshold = quantile at q = 1 - rho, position q * 4
        (0.2, [[0, 0, 1], [0, 0, 0]]),  # q 0.8, pos 3.2: 0.7 + 0.2 * (0.9 - 0.7) = 0.74 -> only 0.9 (1 of 5 = 20%)
        (0.5, [[0, 1, 1], [0, 1, 0]]),  # q 0.5, pos 2: 0.5 exactly -> 0.5 (the tie is kept), 0.7, 0.9
        (0.0, [[0, 0, 1], [0, 0, 0]]),  # q 1: the maximum 0.9 (TRL: "0.0 masks all but the highest entropy token")
        (1.0, [[1, 1, 1], [1, 1, 0]]),  # q 0: the minimum 0.1 -> every real token, never the padding
    ],
)
def test_top_entropy_mask_hand_worked(rho, kept):
    assert top_entropy_mask(ENT, MASK, rho).int().tolist() == kept


def test_ties_at_the_threshold_are_all_kept():
    # [0.5, 0.5, 0.5, 0.1], rho 0.25: sorted 0.1 0.5 0.5 0.5, q 0.75 at pos 2.25 -> 0.5: the three tied tokens
    # are kept (75% of the tokens, not 25%), as TRL's `entropies >= threshold`
    e, m = torch.tensor([[0.5, 0.5, 0.5, 0.1]]), torch.ones(1, 4, dtype=torch.bool)
    assert top_entropy_mask(e, m, 0.25).tolist() == [[True, True, True, False]]


@pytest.mark.parametrize("pad", [NAN, INF, -INF, 1e9])
def test_padding_values_change_nothing(pad):
    e = ENT.clone()
    e[1, 2] = pad
    assert torch.equal(top_entropy_mask(e, MASK, 0.5), top_entropy_mask(ENT, MASK, 0.5))
    corr = registry.build("correction", {"name": "high_entropy_tokens", "rho": 0.5})
    w = corr(_inputs(e))
    assert torch.equal(w, corr(_inputs(ENT))) and torch.isfinite(w).all()


def test_no_real_token_selects_nothing():
    assert not top_entropy_mask(ENT, torch.zeros_like(MASK), 0.2).any()


def _inputs(entropy: torch.Tensor) -> TermInputs:
    z = torch.zeros(2, 3)
    view = StepView({"mask": MASK, "advantages": z, "logp_old": z, "entropy": entropy}, torch.tensor([1]))
    return TermInputs(
        logp=z[1:], logp_old=z[1:], advantages=z[1:], mask=MASK[1:], counts=StepCounts.of(MASK), step=view
    )


def test_the_correction_returns_the_micro_batch_slice_of_the_step_selection():
    w = registry.build("correction", {"name": "high_entropy_tokens", "rho": 0.5})(_inputs(ENT))
    assert w.tolist() == [[0.0, 1.0, 0.0]]  # row 1 of the rho 0.5 case above: only its 0.7


def test_rho_outside_0_1_is_rejected():
    with pytest.raises(registry.ComponentError, match="high_entropy_tokens.*rho must be in"):
        registry.build("correction", {"name": "high_entropy_tokens", "rho": 1.2})


def _slots(rho: float = 0.3, scope: str = "step", corrections: bool = True) -> Slots:
    corr = [{"name": "high_entropy_tokens", "rho": rho, "scope": scope}] if corrections else []
    return Slots.of(load_variant("grpo", {"kl": "none", "aggregate": "token_mean", "correction": corr}))


def _after_update(micro_batch: int, slots: Slots) -> dict[str, torch.Tensor]:
    model, tok = tiny_model_and_tokenizer(seed=0)
    update(
        make_batch(tok, seed=3),
        Models(policy=model, tokenizer=tok, reference=None),
        slots,
        settings(micro_batch=micro_batch),
        torch.optim.SGD(model.parameters(), lr=1.0),
        None,
    )
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_the_update_equals_the_hand_written_selected_loss():
    """One on-policy step (ratio 1, ppo's gradient = -A grad logp) with token_mean: the loss is
    sum over the selected tokens of -A logp, divided by ALL real tokens (the correction weights the
    policy term; the aggregation still counts every token). SGD lr 1: the update is minus its gradient."""
    model, tok = tiny_model_and_tokenizer(seed=0)
    ref = copy.deepcopy(model)
    batch = make_batch(tok, seed=3)
    logp, ent = token_logprobs(
        ref, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1], with_entropy=True
    )
    sel = top_entropy_mask(ent.detach(), batch.loss_mask, 0.3)  # [N, T]
    assert 0 < sel.sum() < batch.loss_mask.sum()
    loss = torch.where(sel, -batch.advantages * logp, torch.zeros_like(logp)).sum() / batch.loss_mask.sum()
    loss.backward()
    expected = {k: p.detach() - p.grad for k, p in ref.named_parameters() if p.grad is not None}
    got = _after_update(8, _slots(0.3))
    for k, v in expected.items():
        torch.testing.assert_close(got[k], v, atol=1e-5, rtol=1e-4, msg=k)


def test_selection_over_the_step_is_the_same_for_micro_batch_2_and_8_and_every_run():
    a, b, again = _after_update(2, _slots()), _after_update(8, _slots()), _after_update(2, _slots())
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5, msg=k)
        assert torch.equal(a[k], again[k]), k  # no randomness: the same tokens, bit for bit
    plain = _after_update(8, _slots(corrections=False))
    assert any(not torch.allclose(a[k], plain[k], atol=1e-6) for k in a)  # the selection did something
    micro = _after_update(2, _slots(scope="micro"))  # within 2-row micro-batches: other tokens, another update
    assert any(not torch.allclose(a[k], micro[k], atol=1e-6) for k in a)


# --- adaptive entropy control -------------------------------------------------------------------------------


def test_controller_moves_as_the_paper_states():
    """target 0.2, delta 0.005, c_0 = 0. Each row: measured entropy -> (c after, coefficient used next step =
    c * 1(e <= target))."""
    c = registry.build("controller", "adaptive_entropy")()
    assert c.coefficients() == {"entropy_bonus": {"coef": 0.0}}  # nothing measured yet: off
    steps = [
        (0.5, 0.0, 0.0),  # above target: c - delta clamped at 0; off
        (0.1, 0.005, 0.005),  # below: c + delta; on
        (0.1, 0.010, 0.010),
        (0.2, 0.010, 0.010),  # at the target: c unchanged; on (<=)
        (0.3, 0.005, 0.0),  # above: c - delta, kept in the state, but the bonus is off
        (NAN, 0.005, 0.0),  # nothing measured (no tokens): unchanged
    ]
    for e, coef, used in steps:
        c.update({"entropy": e}, 10.0, 2.0)
        assert c.coef == pytest.approx(coef, abs=1e-12), e
        assert c.coefficients()["entropy_bonus"]["coef"] == pytest.approx(used, abs=1e-12), e


def test_controller_clamps_at_max_coef_and_round_trips_through_state_dict():
    c = AdaptiveEntropy(target=1.0, delta=0.005, coef=0.01, max_coef=0.012)
    c.update({"entropy": 0.5}, 1.0, 1.0)
    assert c.coef == pytest.approx(0.012)  # 0.015 clamped to max_coef
    d = registry.build("controller", {"name": "adaptive_entropy", "target": 1.0, "max_coef": 0.012})()  # c_0 = 0
    d.load_state_dict(c.state_dict())
    assert d.coefficients() == c.coefficients() == {"entropy_bonus": {"coef": pytest.approx(0.012)}}
    for x in (c, d):
        x.update({"entropy": 1.5}, 1.0, 1.0)
    assert d.state_dict() == c.state_dict() and c.coef == pytest.approx(0.007)


def test_controller_hyperparameters_are_checked():
    with pytest.raises(registry.ComponentError, match="delta must be > 0"):
        registry.build("controller", {"name": "adaptive_entropy", "delta": 0})
    with pytest.raises(registry.ComponentError, match=r"coef must be in \[0, max_coef"):
        registry.build("controller", {"name": "adaptive_entropy", "coef": 2.0})


def test_validate_rejects_a_controller_whose_term_is_missing():
    rep = check_variant(load_variant("grpo", {"controllers": [{"name": "adaptive_entropy"}]}))
    assert any(
        "'adaptive_entropy' sets 'entropy_bonus.coef', but slots.loss has no 'entropy_bonus' term" in e
        for e in rep.errors
    ), rep.errors
    assert check_variant(load_variant("skywork_or1")).ok


def test_skywork_or1_trains_and_logs_the_coefficient(tiny_model_dir, tmp_path):
    """Target 10 nats, above a random tiny model's entropy: the coefficient rises by delta per step and
    the bonus is on from the second step (the first is gated on an entropy not yet measured)."""
    from conftest import tiny_run_config

    from zoo.run.tracking import read_jsonl
    from zoo.run.trainer import train

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / "sky",
        variant="skywork_or1",
        set={"controllers": [{"name": "adaptive_entropy", "target": 10.0, "delta": 0.01}]},
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 2
    recs = [r for r in read_jsonl(tmp_path / "sky" / "metrics.jsonl") if "loss/policy" in r]
    assert [r["entropy_bonus/coef"] for r in recs] == pytest.approx([0.01, 0.02])  # set for the next step
    assert recs[0]["loss/entropy_bonus"] == 0.0 and recs[1]["loss/entropy_bonus"] < 0  # -coef * H, H > 0
    assert all(math.isfinite(r["loss/policy"]) for r in recs)
