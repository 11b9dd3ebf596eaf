"""Rollout corrections (zoo/components/correction/base.py) on hand-worked cases, and the mismatch metrics
(zoo/step/mismatch.py) on their own and through one update of the tiny model."""

import copy
import math

import pytest
import torch
from test_engine import make_batch, params, settings, slots_for

from zoo import StepCounts, TermInputs
from zoo.core import registry
from zoo.core.batch import replace
from zoo.core.registry import ComponentError
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.forwards import rollout_forwards
from zoo.step.logprobs import token_logprobs
from zoo.step.mismatch import RolloutTally, mismatch_k3
from zoo.step.types import Models
from zoo.step.update import update

L2, L15 = math.log(2.0), math.log(1.5)
NAN, INF = float("nan"), float("inf")

# The [2, 3] case. Row 0 has 3 real tokens with rho = pi_old / pi_rollout = [0.5, 1, 4]; row 1 has 2
# real tokens with rho = [2, 1.5] and one padded slot holding NaN (old) and inf (rollout).
# logp_old = logp_rollout + log rho.
ROLL = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.0, INF]])
OLD = torch.tensor([[-1.0 - L2, -2.0, -3.0 + 2 * L2], [-0.5 + L2, -1.0 + L15, NAN]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)


def inputs(old=OLD, roll=ROLL, mask=MASK, logp=None) -> TermInputs:
    return TermInputs(
        logp=old.clone() if logp is None else logp,
        logp_old=old,
        advantages=torch.zeros_like(old),
        mask=mask,
        counts=StepCounts.of(mask),
        logp_rollout=roll,
    )


def weight(spec, inp=None) -> torch.Tensor:
    return registry.build("correction", spec)(inputs() if inp is None else inp)


# Hand-worked weights of the [2, 3] case (padding always 0):
#   tis token, C = 2:            min(rho, 2)            -> [0.5, 1, 2], [2, 1.5]
#   tis sequence, C = 2.5:       products 0.5*1*4 = 2 and 2*1.5 = 3 -> min(., 2.5) = 2 and 2.5
#   mis token (TRL: cap 3):      rho <= 3 kept          -> [0.5, 1, 0 (4 > 3)], [2, 1.5]
#   mis token, [0.6, 3]:         0.5 < 0.6 also masked  -> [0, 1, 0], [2, 1.5]
#   mis sequence, cap 2.5:       2 kept (weight 2), 3 masked
#   rs token, c_high 3:          bounds [1/3, 3]        -> [1, 1, 0], [1, 1]
#   rs sequence, c_high 1.3:     products 2 and 3 both outside [1/1.3, 1.3] -> all 0
#   rs geometric, c_high 1.3:    geometric means 2^(1/3) = 1.26 (kept) and 3^(1/2) = 1.73 (rejected)
CASES = [
    ("tis", [[0.5, 1.0, 2.0], [2.0, 1.5, 0.0]]),
    ({"name": "tis", "level": "sequence", "C": 2.5}, [[2.0, 2.0, 2.0], [2.5, 2.5, 0.0]]),
    ("mis", [[0.5, 1.0, 0.0], [2.0, 1.5, 0.0]]),
    ({"name": "mis", "c_low": 0.6}, [[0.0, 1.0, 0.0], [2.0, 1.5, 0.0]]),
    ({"name": "mis", "level": "sequence", "c_high": 2.5}, [[2.0, 2.0, 2.0], [0.0, 0.0, 0.0]]),
    ({"name": "rs", "c_high": 3.0}, [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]),
    ({"name": "rs", "level": "sequence", "c_high": 1.3}, [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
    ({"name": "rs", "level": "geometric", "c_high": 1.3}, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]),
]


@pytest.mark.parametrize("spec,want", CASES, ids=lambda x: str(x) if not isinstance(x, list) else "")
def test_weights_on_the_hand_worked_case(spec, want):
    w = weight(spec)
    torch.testing.assert_close(w, torch.tensor(want), atol=1e-6, rtol=1e-6)
    assert not w.requires_grad


ALL_SPECS = [
    "tis",
    {"name": "tis", "level": "sequence"},
    "mis",
    {"name": "mis", "level": "sequence"},
    "rs",
    {"name": "rs", "level": "sequence"},
    {"name": "rs", "level": "geometric", "c_high": 1.001},
]


@pytest.mark.parametrize("spec", ALL_SPECS, ids=str)
def test_weight_exactly_one_when_the_sampler_agrees(spec):
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=g) * 3
    mask = torch.arange(5)[None, :] < torch.tensor([5, 3, 1, 4])[:, None]
    w = weight(spec, inputs(old=logp, roll=logp.clone(), mask=mask))
    assert torch.equal(w[mask], torch.ones(int(mask.sum())))  # exactly 1: log rho = 0 and exp(0) = 1
    assert torch.equal(w[~mask], torch.zeros(int((~mask).sum())))


def test_sequence_level_is_clamped_in_log_space():
    # 3 tokens of log rho = 40 each: the product exp(120) overflows float32, the truncated weight is C
    # (exp(min(120, log 2)) = 2); a masked weight of a tiny product stays finite (exp(-20), verl's bound)
    old = torch.tensor([[0.0, 0.0, 0.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    assert torch.equal(
        weight({"name": "tis", "level": "sequence"}, inputs(old, old - 40.0, mask)), torch.full((1, 3), 2.0)
    )
    w = weight({"name": "mis", "level": "sequence"}, inputs(old, old + 40.0, mask))  # product exp(-120) <= 3: kept
    torch.testing.assert_close(w, torch.full((1, 3), math.exp(-20.0)))


@pytest.mark.parametrize("spec", ALL_SPECS, ids=str)
def test_nan_and_inf_in_padding_leave_loss_and_gradient_finite(spec):
    # padded slot of row 1: logp, logp_old NaN, logp_rollout inf; the weight times the clip rule's term
    # (ppo, A = 1 on real tokens) aggregated by token_mean has a finite value and gradient
    logp = torch.tensor([[-1.0 - L2, -2.0, -3.0 + 2 * L2], [-0.5 + L2, -1.0 + L15, NAN]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, NAN]])
    w = weight(spec, inputs(logp=logp))
    res = registry.build("clip", "ppo")(logp, OLD, adv, MASK)
    loss = registry.build("aggregate", "token_mean")(res.loss * w, MASK, StepCounts.of(MASK))
    loss.backward()
    assert math.isfinite(float(loss.detach())) and torch.isfinite(logp.grad).all()
    assert float(logp.grad[1, 2]) == 0.0


def test_no_sampler_logprobs_is_a_clear_error():
    inp = TermInputs(logp=OLD, logp_old=OLD, advantages=torch.zeros(2, 3), mask=MASK, counts=StepCounts.of(MASK))
    with pytest.raises(ValueError, match="correction 'tis' needs the sampler's log-probs \\(logp_rollout\\)"):
        weight("tis", inp)


@pytest.mark.parametrize(
    "spec,msg",
    [
        ({"name": "tis", "C": 0.5}, "C must be a finite number >= 1"),
        ({"name": "tis", "level": "row"}, "level must be one of token, sequence, geometric"),  # geometric: issue 34
        ({"name": "mis", "c_low": 1.5}, "0 <= c_low <= 1 <= c_high"),
        ({"name": "mis", "c_high": 0.9}, "0 <= c_low <= 1 <= c_high"),
        ({"name": "rs", "c_high": 0.5}, "c_high must be a number >= 1"),
        ({"name": "rs", "level": "row"}, "level must be one of token, sequence, geometric"),
    ],
)
def test_bad_parameters_are_rejected_when_built(spec, msg):
    with pytest.raises(ComponentError, match=msg):
        registry.build("correction", spec)


def test_corrections_declare_what_they_read():
    for name in ("tis", "mis", "rs"):
        assert registry.build("correction", name).decl.reads == ("logp_old", "logp_rollout")


# ---------------------------------------------------------------- the metrics
def test_mismatch_k3_by_hand():
    # d = logp_rollout - logp_old = -log rho; k3 = exp(-d) - 1 + d = rho - 1 - log rho:
    # rho 0.5: 0.5 - 1 + log 2 = 0.193147; rho 1: 0; rho 4: 3 - log 4 = 1.613706;
    # rho 2: 1 - log 2 = 0.306853; rho 1.5: 0.5 - log 1.5 = 0.094535; padding 0
    k = mismatch_k3(OLD, ROLL, MASK)
    want = torch.tensor([[0.5 - 1 + L2, 0.0, 3 - 2 * L2], [1 - L2, 0.5 - L15, 0.0]])
    torch.testing.assert_close(k, want, atol=1e-6, rtol=1e-6)


def test_tally_metrics_by_hand():
    t = RolloutTally()
    w = weight("tis")  # [0.5, 1, 2], [2, 1.5]
    t.add(OLD, ROLL, w, MASK)
    t.add(OLD, None, None, MASK)  # a batch without sampler log-probs adds nothing
    m = t.metrics()
    kl = (0.5 - 1 + L2 + 3 - 2 * L2 + 1 - L2 + 0.5 - L15) / 5
    assert m["rollout/mismatch_kl"] == pytest.approx(kl, rel=1e-6)
    assert m["rollout/weight_mean"] == pytest.approx(7.0 / 5)  # (0.5 + 1 + 2 + 2 + 1.5) / 5
    assert m["rollout/weight_max"] == pytest.approx(2.0)
    assert m["rollout/masked_frac"] == 0.0
    t.add(OLD, ROLL, weight({"name": "mis", "c_low": 0.6}), MASK)  # [0, 1, 0], [2, 1.5]: 2 of 5 masked
    assert t.metrics()["rollout/masked_frac"] == pytest.approx(2.0 / 10)
    assert RolloutTally().metrics() == {}
    only_kl = RolloutTally()
    only_kl.add(OLD, ROLL, None, MASK)
    assert set(only_kl.metrics()) == {"rollout/mismatch_kl"}


def test_only_rollout_corrections_enter_the_rollout_weight():
    from zoo.step.mismatch import rollout_weight

    w = torch.tensor([[0.5, 2.0]])
    other = registry.build("loss", "entropy_bonus")  # any component that does not read logp_rollout
    assert rollout_weight(None, other, w) is None
    tis = registry.build("correction", "tis")
    assert torch.equal(rollout_weight(rollout_weight(None, tis, w), tis, w), torch.tensor([[0.25, 4.0]]))


# ---------------------------------------------------------------- through the engine
def _engine_case():
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    with torch.no_grad():
        old, _ = token_logprobs(model, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1])
    old = torch.where(batch.loss_mask, old, torch.zeros_like(old))
    # the sampler's log-probs: the trainer's plus a fixed perturbation delta in [-1.2, 1.2], so that
    # rho = exp(-delta) spans [0.30, 3.32] (some tokens above tis's C = 2); NaN in the padding
    N, T = old.shape
    delta = torch.linspace(-1.2, 1.2, N * T).reshape(N, T)
    roll = torch.where(batch.loss_mask, old + delta, torch.full_like(old, NAN))
    return model, tok, batch, old, roll


@pytest.mark.parametrize(
    "level,micro_batch", [("token", 1), ("token", 2), ("token", 5), ("sequence", 1), ("sequence", 5)]
)
def test_one_update_with_tis_weights_the_loss_by_hand(level, micro_batch):
    model, tok, batch, old, roll = _engine_case()
    batch = replace(batch, logp_old=old, logp_rollout=roll)
    slots = slots_for()
    slots.correction = [registry.build("correction", {"name": "tis", "C": 2.0, "level": level})]
    start = params(model)

    # by hand: one on-policy update, so r = pi / pi_old = 1 and ppo's term is -A r; times
    # w = min(exp(logp_old - logp_rollout), 2) = min(exp(-delta), 2) per token, or per row
    # min(exp(sum_t -delta_t), 2) over its real tokens; token_mean over the real tokens
    m = batch.loss_mask
    lr = torch.where(m, old - torch.nan_to_num(roll), torch.zeros_like(old))
    if level == "sequence":
        lr = lr.sum(1, keepdim=True).expand_as(lr)
    w = torch.where(m, torch.clamp(torch.exp(lr), max=2.0), torch.zeros_like(old))
    ref = copy.deepcopy(model)
    logp, _ = token_logprobs(ref, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1])
    per_token = torch.where(m, -batch.advantages * torch.exp(logp - old) * w, torch.zeros_like(logp))
    want_loss = per_token.sum() / m.sum()
    want_loss.backward()
    want = {k: start[k] - p.grad for k, p in ref.named_parameters()}

    models = Models(policy=model, tokenizer=tok, reference=None)
    out = update(
        batch, models, slots, settings(micro_batch=micro_batch), torch.optim.SGD(model.parameters(), lr=1.0), None
    )
    assert out["loss/policy"] == pytest.approx(float(want_loss.detach()), rel=1e-5, abs=1e-7)
    got = params(model)
    for k in want:
        torch.testing.assert_close(got[k], want[k], atol=2e-6, rtol=1e-5, msg=k)
    # the weighting matters: without it the same step moves the weights differently
    plain = copy.deepcopy(ref)
    plain.zero_grad()
    lp, _ = token_logprobs(plain, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1])
    (torch.where(m, -batch.advantages * lp, torch.zeros_like(lp)).sum() / m.sum()).backward()
    assert max(float((start[k] - p.grad - want[k]).abs().max()) for k, p in plain.named_parameters()) > 1e-4
    # metrics: weights over the real tokens, and the mismatch k3 = exp(-d) - 1 + d with d = delta
    d = torch.where(m, torch.nan_to_num(roll) - old, torch.zeros_like(old))
    assert out["rollout/weight_mean"] == pytest.approx(float(w[m].mean()), rel=1e-5)
    assert out["rollout/weight_max"] == pytest.approx(float(w[m].max()), rel=1e-5)
    assert out["rollout/masked_frac"] == 0.0
    assert out["rollout/mismatch_kl"] == pytest.approx(float((torch.exp(-d) - 1 + d)[m].mean()), rel=1e-5)


def test_mismatch_is_logged_without_a_correction_from_the_update_forward():
    """One on-policy update, no correction, no logp_old: the update's own forward is logp_old."""
    model, tok, batch, old, roll = _engine_case()
    s = settings(micro_batch=2)
    models = Models(policy=model, tokenizer=tok, reference=None)
    assert rollout_forwards(batch, models, slots_for(), s).logp_old is None  # the shortcut stays
    out = update(
        replace(batch, logp_rollout=roll), models, slots_for(), s, torch.optim.SGD(model.parameters(), lr=1.0), None
    )
    m = batch.loss_mask
    d = torch.where(m, torch.nan_to_num(roll) - old, torch.zeros_like(old))
    assert out["rollout/mismatch_kl"] == pytest.approx(float((torch.exp(-d) - 1 + d)[m].mean()), rel=1e-4)
    assert "rollout/weight_mean" not in out
    out = update(batch, models, slots_for(), s, torch.optim.SGD(model.parameters(), lr=1.0), None)
    assert not any(k.startswith("rollout/") for k in out)  # no sampler log-probs: nothing logged


def test_a_correction_makes_the_step_compute_logp_old():
    model, tok, batch, old, roll = _engine_case()
    slots = slots_for()
    slots.correction = [registry.build("correction", "mis")]
    out = rollout_forwards(batch, Models(policy=model, tokenizer=tok, reference=None), slots, settings(micro_batch=2))
    torch.testing.assert_close(out.logp_old, old, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- a whole run (needs the generator kind)
def _needs_generators():
    if "generator" not in registry.KINDS:
        pytest.skip("the `generator` kind (sampling.backend, logp_rollout from the hf sampler) is not merged yet")


def _step_record(out):
    from zoo.run.tracking import read_jsonl

    (r,) = [r for r in read_jsonl(out / "metrics.jsonl") if "loss/policy" in r]
    return r


def test_a_run_logs_the_mismatch_and_the_weights(tiny_model_dir, tmp_path):
    """The hf sampler's log-probs equal the trainer's up to rounding (mismatch ~0, no weights without a
    correction); N(0, 1) noise on the sampler's logits gives a clearly positive mismatch and tis's
    weights (capped at C = 2)."""
    _needs_generators()
    from conftest import tiny_run_config

    from zoo.run.trainer import train

    one = {"budget": {"steps": 1}}
    train(tiny_run_config(tiny_model_dir, tmp_path / "hf", **one), progress=False)
    r = _step_record(tmp_path / "hf")
    assert 0 <= r["rollout/mismatch_kl"] < 1e-4
    assert "rollout/weight_mean" not in r
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / "noisy",
        **one,
        sampling={"backend": {"name": "noisy", "sigma": 1.0}},
        set={"correction": [{"name": "tis", "C": 2.0}]},
    )
    train(cfg, progress=False)
    r = _step_record(tmp_path / "noisy")
    assert r["rollout/mismatch_kl"] > 1e-2
    assert 0 < r["rollout/weight_mean"] <= r["rollout/weight_max"] <= 2.0
    assert r["rollout/masked_frac"] == 0.0  # tis truncates, it never masks


@pytest.mark.parametrize("spec", [{"name": "rs", "c_high": 1.0}, {"name": "mis", "c_low": 1.0, "c_high": 1.0}])
def test_a_band_of_width_zero_is_refused(spec):
    """rs c_high 1 (c_low = 1 / c_high = 1) or mis [1, 1] keep only tokens with rho exactly 1: every
    token the sampler drew differently is masked, so the run trains on nothing. Refused."""
    from zoo.core.registry import ComponentError, build

    with pytest.raises(ComponentError, match="c_low < c_high"):
        build("correction", spec)
