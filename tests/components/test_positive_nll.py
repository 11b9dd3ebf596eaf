"""VAPO's positive-example NLL term (zoo/components/loss/positive_nll.py, arXiv:2504.05118 eq. 9) on a
hand-worked case, split over micro-batches, with garbage in padding, and through the update."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from test_engine import make_batch, settings

from zoo import StepCounts, StepView, TermInputs
from zoo.config.variant import load_variant
from zoo.core import registry
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.logprobs import token_logprobs
from zoo.step.types import Models, Slots
from zoo.step.update import update

NAN = float("nan")
# 3 completions of 2, 1 and 3 real tokens; reward column 0 = correctness: rows 0 and 2 correct
LOGP = torch.tensor([[-1.0, -2.0, 0.0], [-3.0, 0.0, 0.0], [-0.5, -1.5, -1.0]])
MASK = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
OBJ = torch.tensor([[1.0, 0.3], [0.0, 0.9], [1.0, 0.1]])


def _call(logp, rows, obj=OBJ, **hp):
    z = torch.zeros(3, 3)
    view = StepView({"mask": MASK, "advantages": z, "logp_old": z, "objectives": obj}, torch.tensor(rows))
    inp = TermInputs(
        logp=logp[rows], logp_old=z[rows], advantages=z[rows], mask=MASK[rows], counts=StepCounts.of(MASK), step=view
    )
    term = registry.build("loss", {"name": "nll_positive", **hp})
    agg = registry.build("aggregate", term.decl.aggregate)
    return agg(term(inp).loss, MASK[rows], inp.counts)


def test_hand_worked_token_mean_over_correct_completions():
    # correct tokens: row 0 (1, 2) and row 2 (0.5, 1.5, 1.0): 5 tokens, -logp sum 6.0 -> mean 1.2; x mu 0.1 = 0.12
    # (row 1, incorrect, and the 6 real tokens of the step as a denominator would give 0.1 * 9/6 = 0.15: not that)
    assert _call(LOGP, [0, 1, 2]).item() == pytest.approx(0.12)
    # micro-batches {0, 1} and {2}: each divides by the step's counts, the parts sum to the step's value
    assert (_call(LOGP, [0, 1]) + _call(LOGP, [2])).item() == pytest.approx(0.12)
    # column 1 with threshold 0.5: only row 1 (0.9) is correct: mean 3.0 x 0.1 = 0.3
    assert _call(LOGP, [0, 1, 2], column=1, threshold=0.5).item() == pytest.approx(0.3)


def test_gradient_is_minus_mu_over_correct_tokens_and_padding_changes_nothing():
    logp = LOGP.clone()
    logp[~MASK] = NAN  # garbage in the padded slots
    logp.requires_grad_(True)
    loss = _call(logp, [0, 1, 2])
    loss.backward()
    assert loss.item() == pytest.approx(0.12)
    expected = torch.tensor([[-0.02, -0.02, 0.0], [0.0, 0.0, 0.0], [-0.02, -0.02, -0.02]])  # -mu / 5 tokens
    torch.testing.assert_close(logp.grad, expected)


def test_unscored_rows_are_not_correct_and_no_correct_row_gives_zero():
    obj = OBJ.clone()
    obj[2, 0] = NAN  # row 2 unscored: only row 0 (mean 1.5) -> 0.15
    assert _call(LOGP, [0, 1, 2], obj=obj).item() == pytest.approx(0.15)
    assert _call(LOGP, [0, 1, 2], obj=torch.zeros(3, 2)).item() == 0.0


def test_nothing_to_judge_by_is_a_clear_error():
    with pytest.raises(ValueError, match=r"column 2 does not exist; the run has 2 reward column\(s\)"):
        _call(LOGP, [0, 1, 2], column=2)
    z = torch.zeros(1, 3)
    inp = TermInputs(
        logp=z,
        logp_old=z,
        advantages=z,
        mask=MASK[:1],
        counts=StepCounts.of(MASK[:1]),
        step=StepView({"mask": MASK[:1], "advantages": z, "logp_old": z}, torch.tensor([0])),
    )
    with pytest.raises(ValueError, match="needs the reward columns"):
        registry.build("loss", "nll_positive")(inp)
    with pytest.raises(registry.ComponentError, match="column must be a reward column index"):
        registry.build("loss", {"name": "nll_positive", "column": -1})


def _run(micro_batch: int, aggregate: str):
    model, tok = tiny_model_and_tokenizer(seed=0)
    batch = make_batch(tok, seed=3)
    correct = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])[:, None]  # 5 rows (test_engine.LENGTHS)
    batch = replace(batch, objectives=correct)
    slots = Slots.of(load_variant("grpo", {"kl": "none", "aggregate": aggregate, "loss": ["nll_positive"]}))
    logp, _ = token_logprobs(model, batch.input_ids(), batch.attention_mask(), batch.completion_ids.shape[1])
    pos = batch.loss_mask & (correct > 0)
    expected = 0.1 * float(-logp.detach()[pos].mean())
    m = update(
        batch,
        Models(policy=model, tokenizer=tok, reference=None),
        slots,
        settings(micro_batch=micro_batch),
        torch.optim.SGD(model.parameters(), lr=1.0),
        None,
    )
    return m, expected, {k: v.detach().clone() for k, v in model.named_parameters()}


def test_through_the_update_own_aggregation_and_micro_batch_split():
    m8, expected, p8 = _run(8, "token_mean")
    assert m8["loss/nll_positive"] == pytest.approx(expected, rel=1e-4)
    m_seq, _, _ = _run(8, "seq_mean_token_mean")  # the variant's aggregation does not change the term's value
    assert m_seq["loss/nll_positive"] == pytest.approx(expected, rel=1e-4)
    m2, _, p2 = _run(2, "token_mean")
    assert m2["loss/nll_positive"] == pytest.approx(expected, rel=1e-4)
    for k in p8:
        torch.testing.assert_close(p2[k], p8[k], atol=1e-6, rtol=1e-5, msg=k)


def test_trains_two_steps_reading_the_runs_reward_columns(tiny_model_dir, tmp_path):
    """A random tiny model is never correct (loss 0 with the defaults), so judge by reward column 1 (the
    length reward of the tiny run) with a threshold every score passes: every completion counts, the term is
    mu x the mean NLL > 0."""
    from conftest import tiny_run_config

    from zoo.run.tracking import read_jsonl
    from zoo.run.trainer import train

    cfg = tiny_run_config(
        tiny_model_dir, tmp_path / "nll", set={"loss": [{"name": "nll_positive", "column": 1, "threshold": -1.0e9}]}
    )
    assert train(cfg, progress=False)["steps"] == 2
    recs = [r for r in read_jsonl(tmp_path / "nll" / "metrics.jsonl") if "loss/policy" in r]
    assert len(recs) == 2 and all(r["loss/nll_positive"] > 0 for r in recs)


def test_the_step_view_gathers_row_fields_unpadded_over_ranks(monkeypatch):
    """Two ranks with 3 and 5 completion columns: [M, T] fields are padded to 5, objectives [M, K] are
    concatenated as they are (K is no token axis)."""
    from zoo.core import dist
    from zoo.step import selection

    a = {"mask": torch.ones(1, 3, dtype=torch.bool), "objectives": torch.tensor([[1.0, 0.5]])}
    b = {"mask": torch.ones(2, 5, dtype=torch.bool), "objectives": torch.tensor([[0.0, 0.1], [1.0, 0.2]])}
    monkeypatch.setattr(dist, "is_distributed", lambda: True)
    monkeypatch.setattr(dist, "all_gather_object", lambda obj: [a, b])
    out = selection._gather(a)
    assert out["mask"].shape == (3, 5) and out["mask"][0].tolist() == [True, True, True, False, False]
    torch.testing.assert_close(out["objectives"], torch.tensor([[1.0, 0.5], [0.0, 0.1], [1.0, 0.2]]))


def test_threshold_must_be_a_finite_number():
    from zoo.core.registry import ComponentError, build

    for bad in ("high", float("nan"), True):
        with pytest.raises(ComponentError, match="threshold.*must be a (finite )?number"):
            build("loss", {"name": "nll_positive", "threshold": bad})
