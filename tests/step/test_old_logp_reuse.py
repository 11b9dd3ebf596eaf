"""The first minibatch's old log-probs from its training forward (zoo.step.forwards.reuses_old): under one
on-policy epoch of several minibatches the rollout forwards skip the rows the first optimizer step trains,
and the update gives the same weights and metrics as with a forward of their own (fp32, rtol 1e-5)."""

import contextlib
import copy

import pytest
import torch
from conftest import ForwardRows, tiny_run_config
from test_engine import LENGTHS, PROMPTS, make_batch, settings, slots_for

from zoo.config.variant import load_variant
from zoo.core.batch import Batch
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.forwards import first_order, old_rows, reuses_old, rollout_forwards
from zoo.step.types import Models, Slots
from zoo.step.update import update


def test_old_rows_by_hand():
    slots = slots_for()
    order = torch.tensor([4, 0, 3, 1, 2])  # minibatches of tensor_split(2): [4, 0, 3], [1, 2]
    assert old_rows(5, slots, settings(2, minibatches=2), order).tolist() == [1, 2]
    assert old_rows(5, slots, settings(2, minibatches=2), None).tolist() == [0, 1, 2, 3, 4]  # order unknown
    assert old_rows(5, slots, settings(2, epochs=2), order).tolist() == [0, 1, 2, 3, 4]  # rows trained twice
    assert old_rows(5, slots, settings(2), torch.arange(5)).tolist() == []  # one on-policy update
    kl_reward = Slots.of(load_variant("ppo"))  # the KL in the reward reads logp_old before the update
    assert not reuses_old(kl_reward, settings(2, minibatches=2))
    assert old_rows(5, kl_reward, settings(2, minibatches=2), order).tolist() == [0, 1, 2, 3, 4]


def _doubled(tok) -> Batch:
    """10 rows: the same 5 prompts twice, so the second minibatch has rows the first one pushed on."""
    return make_batch(tok, seed=2, lengths=LENGTHS + LENGTHS, prompts=PROMPTS + PROMPTS)


def _step(model, tok, batch, s, *, order=None, hooks=None, gen_seed=0) -> dict[str, float]:
    """Rollout forwards + update with SGD (linear in the gradient, so float noise stays float noise)."""
    models = Models(policy=model, tokenizer=tok, reference=None)
    slots = slots_for()
    kw = {} if hooks is None else {"hooks": hooks}
    b = rollout_forwards(batch, models, slots, s, order=order, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    gen = torch.Generator().manual_seed(gen_seed)
    return update(b, models, slots, s, opt, None, generator=gen, order=order)


def _max_rel(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """The largest ||p - q|| / ||q|| over the parameters (fp32 noise of a few ulps per element passes)."""
    with torch.no_grad():
        return max(float((p - q).norm() / q.norm()) for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("minibatches", [2, 3])
def test_first_minibatch_reuses_the_training_forward(minibatches):
    model, tok = tiny_model_and_tokenizer(seed=4)
    s = settings(micro_batch=2, minibatches=minibatches)
    batch = _doubled(tok)
    base = copy.deepcopy(model)
    ref = _step(base, tok, batch, s)  # every row's old log-probs from a rollout forward
    order = first_order(batch.size, s, torch.Generator().manual_seed(0))  # the order update draws in `ref`
    seen = ForwardRows()
    out = _step(model, tok, batch, s, order=order, hooks=seen)
    first = len(order.tensor_split(minibatches)[0])
    rollout_rows = sum(n for role, n in seen.rows if role == "policy")
    assert rollout_rows == batch.size - first  # the rollout forwards ran only the later minibatches' rows
    assert _max_rel(model, base) < 1e-5
    for k in ("loss/policy", "ratio/max", "ratio/approx_kl", "clip/low_frac", "clip/high_frac", "optim/grad_norm"):
        assert out[k] == pytest.approx(ref[k], rel=1e-5, abs=1e-9), k
    assert out["ratio/approx_kl"] > 1e-6  # later minibatches did see pi / pi_old off one


def test_reusing_later_minibatches_would_differ():
    """What the check above would catch: taking every minibatch's old log-probs from its training
    forward (the policy has moved by then) changes the weights far beyond float noise."""
    model, tok = tiny_model_and_tokenizer(seed=4)
    s = settings(micro_batch=2, minibatches=2)
    batch = _doubled(tok)
    base = copy.deepcopy(model)
    _step(base, tok, batch, s)
    models = Models(policy=model, tokenizer=tok, reference=None)
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    update(batch, models, slots_for(), s, opt, None, generator=torch.Generator().manual_seed(0))  # no logp_old
    assert _max_rel(model, base) > 1e-3


def test_pipeline_step_skips_the_first_minibatchs_old_forward(tiny_model_dir, tmp_path):
    """grpo at 1 x 2 updates (no KL in the reward): the forward phase runs the policy on the second
    minibatch's rows only (8 rows, 4 + 4)."""
    from zoo.run import trainer
    from zoo.step import pipeline

    class Phases(ForwardRows):
        def __init__(self):
            super().__init__()
            self.now = []

        @contextlib.contextmanager
        def phase(self, name):
            self.now.append(name)
            with super().phase(name) as ph:
                yield ph
            self.now.pop()

        @contextlib.contextmanager
        def forward(self, role, mb):
            self.rows.append((f"{self.now[-1]}/{role}", mb.size))
            yield

    cfg = tiny_run_config(
        tiny_model_dir, tmp_path, variant="dr_grpo", budget={"updates": {"epochs": 1, "minibatches": 2}}
    )
    st = trainer.setup(cfg)
    h = Phases()
    m = pipeline.step(st, hooks=h).metrics
    assert sum(n for k, n in h.rows if k == "forward/policy") == 4
    assert sum(n for k, n in h.rows if k == "train/policy") == 8
    assert m["optim/steps"] == 2.0
