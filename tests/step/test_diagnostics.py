"""zoo.step.diagnostics: adv/corr/<objective> on objectives centred within their group, length by
correctness, length-reward correlation and gold rewards, each worked out by hand."""

import math

import pytest
import torch

from zoo.core.batch import Batch
from zoo.step.diagnostics import gold_metrics, group_centred, pearson, step_diagnostics


def two_group_batch() -> Batch:
    """Two groups of two. Rows (group, token advantages on real tokens, R1 = correctness, R2, length):
    r0 (0, [1, 1], 1, 0, 2); r1 (0, [-1], 0, 2, 1); r2 (1, [.5, .5, .5], 1, 10, 3); r3 (1, [-.5, -.5], 0, 20, 2).
    A third column is constant (1.0 everywhere). Padding tokens carry 99 (must not count)."""
    lengths = torch.tensor([2, 1, 3, 2])
    T = 3
    mask = torch.arange(T)[None, :] < lengths[:, None]
    adv_rows = torch.tensor([[1.0, 1.0, 99.0], [-1.0, 99.0, 99.0], [0.5, 0.5, 0.5], [-0.5, -0.5, 99.0]])
    obj = torch.tensor([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0], [1.0, 10.0, 1.0], [0.0, 20.0, 1.0]])
    N = 4
    return Batch(
        prompt_ids=torch.zeros(N, 1, dtype=torch.long),
        prompt_mask=torch.ones(N, 1, dtype=torch.bool),
        completion_ids=torch.zeros(N, T, dtype=torch.long),
        loss_mask=mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        truncated=torch.zeros(N, dtype=torch.bool),
        lengths=lengths,
        objectives=obj,
        advantages=adv_rows,
    )


def test_adv_corr_uses_group_centred_objectives_two_groups():
    # token-mean advantages: [1, -1, 0.5, -0.5] (the 99s are padding)
    # R1 centred per group: g0 mean 0.5 -> [.5, -.5]; g1 mean 0.5 -> [.5, -.5]
    #   sum(a*c) = .5 + .5 + .25 + .25 = 1.5; |a|^2 = 2.5; |c|^2 = 1 -> 1.5 / sqrt(2.5) = 0.948683
    # R2 centred per group: g0 [0, 2] -> [-1, 1]; g1 [10, 20] -> [-5, 5]
    #   sum(a*c) = -1 - 1 - 2.5 - 2.5 = -7; |c|^2 = 52 -> -7 / sqrt(130) = -0.613941
    #   (pooled raw R2 [-8, -6, 2, 12] around its mean 8 would give -7 / sqrt(2.5 * 248) = -0.2811)
    # the constant column has no variance: NaN
    m = step_diagnostics(
        two_group_batch(), ["correctness", "r2", "const"], [1.0, 0.1, 1.0], n_rewards=2, accuracy_col=0
    )
    assert m["adv/corr/correctness"] == pytest.approx(1.5 / math.sqrt(2.5))
    assert m["adv/corr/r2"] == pytest.approx(-7 / math.sqrt(130))
    assert m["adv/corr/r2"] != pytest.approx(-7 / math.sqrt(2.5 * 248), abs=1e-3)
    assert math.isnan(m["adv/corr/const"])


def test_len_correct_incorrect_and_len_reward_corr():
    # correct (R1 == 1): r0 (len 2), r2 (len 3) -> 2.5; incorrect: r1 (1), r3 (2) -> 1.5
    # weighted raw reward over the 2 rewards (w = [1, 0.1]): [1, 0.2, 2, 2] -> centred [.4, -.4, 0, 0]
    # lengths centred: g0 [2, 1] -> [.5, -.5]; g1 [3, 2] -> [.5, -.5]
    #   sum = .2 + .2 = .4; |r|^2 = .32; |l|^2 = 1 -> .4 / sqrt(.32) = 0.707107
    m = step_diagnostics(
        two_group_batch(), ["correctness", "r2", "const"], [1.0, 0.1, 1.0], n_rewards=2, accuracy_col=0
    )
    assert m["completion/len_correct"] == 2.5
    assert m["completion/len_incorrect"] == 1.5
    assert m["completion/len_reward_corr"] == pytest.approx(0.4 / math.sqrt(0.32))


def test_no_accuracy_reward_no_length_by_correctness_and_unscored_rows_left_out():
    b = two_group_batch()
    m = step_diagnostics(b, ["correctness", "r2", "const"], [1.0, 0.1, 1.0], n_rewards=2, accuracy_col=None)
    assert "completion/len_correct" not in m and "completion/len_incorrect" not in m
    b.objectives[3, 0] = float("nan")  # r3 unscored: not counted as incorrect -> only r1 (len 1)
    m = step_diagnostics(b, ["correctness", "r2", "const"], [1.0, 0.1, 1.0], n_rewards=2, accuracy_col=0)
    assert m["completion/len_incorrect"] == 1.0
    assert step_diagnostics(b.select([]), ["correctness"], [1.0], 1, 0) == {}


def test_group_centred_and_pearson_edge_cases():
    x = torch.tensor([1.0, 3.0, float("nan"), 5.0])
    g = torch.tensor([0, 0, 1, 1])
    c = group_centred(x, g)  # g0 mean 2 -> [-1, 1]; g1: the NaN is left out, mean 5 -> [nan, 0]
    assert c[:2].tolist() == [-1.0, 1.0] and math.isnan(c[2]) and c[3] == 0.0
    assert math.isnan(pearson(torch.tensor([1.0]), torch.tensor([2.0])))  # one row
    assert math.isnan(pearson(torch.tensor([0.9, 0.9, 0.9]), torch.tensor([1.0, 2.0, 3.0])))  # constant up to rounding
    assert pearson(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 6.5])) == pytest.approx(
        float(torch.corrcoef(torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.5]]))[0, 1])
    )


def test_gold_rewards_are_means_of_what_they_score():
    from zoo.rewards.compute import resolve_reward

    gold = [resolve_reward("correctness")]
    rows = [{"answer": "4"}, {"answer": "4"}, {"answer": "5"}]
    m = gold_metrics(gold, ["4", "3", "5"], rows)  # right, wrong, right -> 2/3
    assert m == {"gold/correctness": pytest.approx(2 / 3)}
    assert gold_metrics([], ["4"], rows[:1]) == {}


def test_a_run_logs_the_diagnostics_and_gold_rewards_that_do_not_train(tiny_model_dir, tmp_path):
    from conftest import tiny_run_config

    from zoo.run import fingerprint as fp
    from zoo.run.tracking import read_jsonl
    from zoo.run.trainer import train

    over = {"eval": {"enabled": False}}
    plain = tiny_run_config(tiny_model_dir, tmp_path / "plain", **over)
    gold = tiny_run_config(tiny_model_dir, tmp_path / "gold", gold=["correctness"], **over)
    train(plain)
    train(gold)
    steps = [
        [r for r in read_jsonl(d / "metrics.jsonl") if "reward/total" in r]
        for d in (tmp_path / "plain", tmp_path / "gold")
    ]
    for a, b in zip(*steps):
        assert a["loss/policy"] == b["loss/policy"]  # gold rewards never train
        assert b["gold/correctness"] == b["reward/correctness"]  # the same function on the same completions
        assert "gold/correctness" not in a
        for key in (
            "adv/corr/correctness",
            "adv/corr/length",
            "completion/len_reward_corr",
            "completion/len_correct",
            "completion/len_incorrect",
        ):
            assert key in b
    assert "gold" in fp.fingerprint_fields(gold) and "gold" not in fp.fingerprint_fields(plain)
    assert fp.fingerprint(gold)[0] != fp.fingerprint(plain)[0]


def test_an_unknown_gold_reward_is_an_error_before_any_model_loads(tiny_model_dir, tmp_path):
    from conftest import tiny_run_config

    from zoo.config.variant import VariantError
    from zoo.run.trainer import validate_run

    cfg = tiny_run_config(tiny_model_dir, tmp_path, gold=["correctnes"])
    with pytest.raises(VariantError, match=r"gold: .*correctnes.*correctness"):
        validate_run(cfg)
