"""Dynamic sampling (DAPO §3.2): whole groups kept iff 0 < mean accuracy < 1; row-order invariant."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from zoo.components.filter import dynamic_sampling
from zoo.registry import ComponentError, build


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
