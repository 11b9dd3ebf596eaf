"""The rollout worker of asynchronous training (zoo/backends/generate/rollout_worker.py): it holds its
own copy of the policy, loads versions through `accept` (the weight-transfer contract), and samples a
group from its own seeded generator without touching torch's global RNG."""

from __future__ import annotations

import pytest
import torch

from zoo.backends.generate.rollout_worker import RolloutWorker
from zoo.core.generator_types import SamplingParams
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.producer import published

SAMPLING = SamplingParams(max_new_tokens=6)


def _worker():
    model, tok = tiny_model_and_tokenizer(seed=0)
    return model, tok, RolloutWorker(model.config, tok)


def test_after_a_sync_the_workers_logprobs_equal_the_trainers_forward_of_that_version():
    model, tok, w = _worker()
    with torch.no_grad():  # version 1: weights the worker did not start from
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert w.accept(published(model, 1)) == 1
    b = w.generate("3+4=", 4, SAMPLING, seed=11)  # [4, T]
    ids = torch.cat([b.prompt_ids, b.completion_ids], dim=1)  # one prompt: no padding on the left
    with torch.no_grad():
        logits = model(ids).logits[:, b.prompt_ids.shape[1] - 1 : -1].float()  # [4, T, V]
    logp = torch.log_softmax(logits, -1).gather(2, b.completion_ids[..., None]).squeeze(2)  # [4, T]
    m = b.loss_mask.bool()
    assert torch.allclose(logp[m], b.logp_rollout[m], atol=1e-5)


def test_a_seeded_group_repeats_and_leaves_the_global_rng_alone():
    _, _, w = _worker()
    w.accept(published(tiny_model_and_tokenizer(seed=0)[0], 0))
    before = torch.get_rng_state()
    a, b, c = (w.generate("1+1=", 4, SAMPLING, seed=s) for s in (5, 5, 6))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.logp_rollout, b.logp_rollout)
    assert not torch.equal(a.completion_ids, c.completion_ids)


def test_accept_refuses_an_older_version_and_a_foreign_weight():
    model, _, w = _worker()
    w.accept(published(model, 2))
    with pytest.raises(ValueError, match="not newer than the held 2"):
        w.accept(published(model, 2))
    with pytest.raises(ValueError, match="unknown weight 'x'"):
        w.accept(type(published(model, 3))(3, (("x", torch.zeros(1)),)))


def test_generate_before_any_version_is_an_error():
    _, _, w = _worker()
    with pytest.raises(RuntimeError, match="no policy version yet"):
        w.generate("1+1=", 2, SAMPLING, seed=0)
