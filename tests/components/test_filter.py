"""Dynamic sampling (DAPO §3.2): whole groups kept iff their metric values are not all equal (for
accuracy: 0 < mean < 1); row-order invariant; the metric it names is checked against the rewards."""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.checks.variant import check_reward_reads
from zoo.components.filter import dynamic_sampling, step_metric_kinds
from zoo.core.registry import ComponentError, build
from zoo.rewards import resolve_rewards


def test_keeps_mixed_groups_only():
    acc = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, float("nan")])
    gid = torch.tensor([7, 7, 3, 3, 9, 9, 4, 4])
    keep = build("filter", "dynamic_sampling")({"accuracy": acc, "reward": acc}, gid)
    assert keep.dtype == torch.bool
    # group 7 mixed -> kept; 3 all correct, 9 all wrong -> dropped; 4: one valid value (1) -> dropped
    assert keep.tolist() == [True, True, False, False, False, False, False, False]


def test_other_metric_by_name():
    m = {"accuracy": torch.tensor([1.0, 1.0]), "format": torch.tensor([1.0, 0.0])}
    keep = build("filter", {"name": "dynamic_sampling", "metric": "format"})(m, torch.tensor([0, 0]))
    assert keep.tolist() == [True, True]


def test_unknown_metric_lists_available():
    with pytest.raises(ValueError, match="available: accuracy, reward"):
        dynamic_sampling({"reward": torch.ones(2), "accuracy": torch.ones(2)}, torch.tensor([0, 0]), metric="acc")
    with pytest.raises(ComponentError):
        build("filter", {"name": "dynamic_sampling", "metric": ""})


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_row_order_invariant_and_whole_groups(data):
    n = data.draw(st.integers(1, 12))
    acc = torch.tensor(data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n)))
    gid = torch.tensor(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    keep = dynamic_sampling({"accuracy": acc}, gid)
    perm = torch.randperm(n)
    assert torch.equal(dynamic_sampling({"accuracy": acc[perm]}, gid[perm]), keep[perm])
    for g in gid.unique():
        rows = gid == g
        assert keep[rows].all() or not keep[rows].any()
        correct = int(acc[rows].sum())
        assert bool(keep[rows][0]) == (0 < correct < int(rows.sum()))


def test_a_continuous_metric_drops_only_the_groups_whose_values_tie():
    # lengths / scale: group 0 differs (kept), group 1 ties (zero variance: dropped), group 2 has
    # values above 1 (the old 0 < mean < 1 rule dropped it although it has a real advantage)
    length = torch.tensor([0.3, 0.7, 0.5, 0.5, 2.0, 3.5])
    gid = torch.tensor([0, 0, 1, 1, 2, 2])
    keep = build("filter", {"name": "dynamic_sampling", "metric": "length"})({"length": length}, gid)
    assert keep.tolist() == [True, True, False, False, True, True]


def test_partial_credit_that_ties_is_dropped_and_nan_is_left_out():
    c = torch.tensor([0.5, 0.5, 0.5, 1.0, float("nan"), 0.0, float("nan"), float("nan")])
    gid = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    keep = dynamic_sampling({"correctness": c}, gid, metric="correctness")
    # group 0 all 0.5 (zero variance), group 3 no valid value: dropped; 1 mixed; 2 one valid value: dropped
    assert keep.tolist() == [False, False, True, True, False, False, False, False]


def rewards(*specs):
    return [comp for comp, _ in resolve_rewards(list(specs))]


def test_step_metric_kinds_from_the_rewards():
    assert step_metric_kinds(rewards("correctness", "format")) == {
        "correctness": True,
        "format": True,
        "accuracy": True,
        "reward": True,
    }
    assert step_metric_kinds(rewards("format", {"name": "length", "scale": 10.0})) == {
        "format": True,
        "length": False,
        "reward": False,
    }


@pytest.mark.parametrize(
    "metric, specs, error, warning",
    [
        ("accuracy", ["correctness"], None, None),
        (
            "accuracy",
            ["format"],
            "metric 'accuracy' will not exist (it needs a `correctness` reward); the step's metrics are format, reward",
            None,
        ),
        ("acuracy", ["correctness"], "metric 'acuracy' will not exist (no reward produces it)", None),
        ("format", ["correctness", "format"], None, None),
        ("length", ["correctness", "length"], None, "metric 'length' is continuous"),
        ("reward", ["correctness", "length"], None, "metric 'reward' is continuous"),
    ],
)
def test_check_filter_metrics(metric, specs, error, warning):
    slots = SimpleNamespace(filter=[{"name": "dynamic_sampling", "metric": metric}])
    errors, warnings = check_reward_reads(slots, rewards(*specs))
    assert (len(errors) == 1 and errors[0].startswith(f"filter dynamic_sampling: {error}")) if error else errors == []
    assert (
        (len(warnings) == 1 and warning in warnings[0] and "keeps nearly every group" in warnings[0])
        if warning
        else warnings == []
    )


def test_reward_reads_of_length_rewards_and_loss_columns():
    """kimi_length reads `accuracy` (needs a correctness reward); nll_positive reads reward column
    `column` (0-based, in the order of `rewards:`). Both are errors before any model loads."""
    slots = SimpleNamespace(length=[{"name": "kimi_length"}], loss=[{"name": "nll_positive", "column": 1}])
    errors, warnings = check_reward_reads(slots, rewards("format"))
    assert (
        errors
        == [
            "length kimi_length: metric 'accuracy' will not exist (it needs a `correctness` reward); "
            "the step's metrics are format, reward",
            "loss nll_positive: column 1 does not exist; the run has 1 reward column(s), numbered 0 .. 0 "
            "in the order of the run file's `rewards:`",
        ]
        and warnings == []
    )
    assert check_reward_reads(slots, rewards("format", "correctness")) == ([], [])  # column 1: correctness
    # a continuous metric: kimi_length reads 1.0 as correct, so nearly every row would be incorrect
    slots = SimpleNamespace(length=[{"name": "kimi_length", "metric": "length"}])
    errors, warnings = check_reward_reads(slots, rewards("correctness", {"name": "length", "scale": 10.0}))
    assert errors == [] and len(warnings) == 1 and "metric 'length' is not a 0/1 correctness score" in warnings[0]
    # nll_positive's default column 0 pointing at the length reward: a warning naming the right column
    slots = SimpleNamespace(loss=[{"name": "nll_positive"}])
    errors, warnings = check_reward_reads(slots, rewards({"name": "length", "scale": 10.0}, "correctness"))
    assert errors == [] and warnings == [
        "loss nll_positive: column 0 is 'length', not a correctness reward, yet a "
        "row counts as correct when its score is >= the threshold: set column: 1 "
        "(correctness)"
    ]
