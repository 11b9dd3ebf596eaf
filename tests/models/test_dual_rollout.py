"""The dual_encoder rollout (zoo.models.dual_rollout): candidates, log-probs, entropy."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.models.dual_rollout import pick_candidates, rollout


def test_topk_takes_the_most_probable_classes_with_their_log_probs():
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0]])
    roll = rollout(logits, 2, "topk")
    assert roll.candidates.tolist() == [[1, 2]]
    z = math.log(sum(math.exp(x) for x in (0.0, 2.0, 1.0, -1.0)))
    assert roll.logp[0].tolist() == pytest.approx([2.0 - z, 1.0 - z], abs=1e-6)


def test_entropy_of_uniform_logits_is_log_c():
    assert rollout(torch.zeros(2, 4), 1).entropy.tolist() == pytest.approx([math.log(4)] * 2, abs=1e-6)


def test_sample_draws_distinct_classes_with_the_policys_frequencies():
    gen = torch.Generator().manual_seed(0)
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(4000, 3)
    first = pick_candidates(logits, 1, "sample", gen)[:, 0]
    assert (first == 0).float().mean().item() == pytest.approx(0.7, abs=0.03)
    full = pick_candidates(logits[:50], 3, "sample", gen)
    assert all(sorted(r) == [0, 1, 2] for r in full.tolist())  # without replacement: a permutation


def test_bad_mode_or_group_names_the_key():
    with pytest.raises(ValueError, match="key 'candidates': must be one of topk, sample"):
        pick_candidates(torch.zeros(1, 3), 2, "beam")
    with pytest.raises(ValueError, match="key 'group_size': must be 1..3"):
        pick_candidates(torch.zeros(1, 3), 4, "topk")
