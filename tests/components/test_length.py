"""Length shaping: case C12 (DAPO eq. 13), parameter checks, overlong filtering."""

import pytest
import torch

from zoo.components.length import overlong_filter, overlong_soft
from zoo.core.registry import ComponentError, available, build
from zoo.core.types import LengthResult, LengthRows

LENGTHS = torch.tensor([100, 384, 448, 512, 600])


def test_registered():
    assert available("length") == ["kimi_length", "overlong_filter", "overlong_soft"]


def test_c12_soft_overlong_punishment():
    res = overlong_soft(LENGTHS, torch.zeros(5, dtype=torch.bool), 512, cache_len=128, max_len=512)
    assert isinstance(res, LengthResult) and res.keep is None
    torch.testing.assert_close(res.column, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]), atol=1e-6, rtol=0)


def test_c12_max_len_defaults_to_max_new_tokens_and_cache_frac():
    comp = build("length", {"name": "overlong_soft", "cache_frac": 0.25}, context={"max_new_tokens": 512})
    res = comp(LENGTHS, torch.zeros(5, dtype=torch.bool), 512)
    torch.testing.assert_close(res.column, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]), atol=1e-6, rtol=0)


def test_soft_ramp_is_linear_inside_the_window():
    res = overlong_soft(torch.arange(380, 520, 4), torch.zeros(35, dtype=torch.bool), 512, cache_len=128)
    col = res.column
    assert (col <= 0).all() and (col >= -1).all()
    assert (col[1:] <= col[:-1]).all()  # non-increasing in length
    torch.testing.assert_close(col[torch.arange(380, 520, 4) == 400], torch.tensor([-16 / 128]))


@pytest.mark.parametrize(
    "params, context",
    [
        ({"cache_len": 128, "cache_frac": 0.2}, {}),
        ({}, {}),
        ({"cache_len": 512}, {"max_new_tokens": 512}),
        ({"cache_len": 600}, {"max_new_tokens": 512}),
        ({"cache_len": 0}, {}),
        ({"cache_len": -4}, {}),
        ({"cache_len": 64, "max_len": 64}, {}),
        ({"cache_frac": 1.0}, {}),
        ({"cache_frac": 0.0}, {}),
    ],
)
def test_soft_bad_parameters(params, context):
    with pytest.raises(ComponentError):
        build("length", {"name": "overlong_soft", **params}, context=context)


def test_soft_checked_at_call_time():
    comp = build("length", {"name": "overlong_soft", "cache_len": 128})  # max_new_tokens unknown yet: ok
    with pytest.raises(ValueError, match="must be < max_len"):
        comp(LENGTHS, torch.zeros(5, dtype=torch.bool), 100)


def test_overlong_filter_keeps_untruncated():
    truncated = torch.tensor([False, True, False, True, True])
    comp = build("length", "overlong_filter")
    assert comp.entry.fn is overlong_filter
    res = comp(LENGTHS, truncated, 512)
    assert res.column is None
    assert res.keep.tolist() == [True, False, True, False, False]
    assert res.keep.dtype == torch.bool


# ---- kimi_length: Kimi k1.5 arXiv 2501.12599 §2.3.3 -------------------------------------------


def kimi(lengths, gids, acc, **params):
    rows = LengthRows(group_ids=torch.tensor(gids), metrics={"accuracy": torch.tensor(acc)})
    n = len(lengths)
    return build("length", {"name": "kimi_length", **params})(
        torch.tensor(lengths), torch.zeros(n, dtype=torch.bool), 512, rows
    ).column


def test_kimi_length_hand_worked():
    # group 4: lengths [10, 20, 30], min 10, max 30: lam = 0.5 - (len - 10)/20 = [0.5, 0, -0.5];
    #   correct [1, 0, 1] -> [0.5, min(0, 0) = 0, -0.5]
    # group 1: lengths [5, 15]: lam = [0.5, -0.5]; correct [0, 1] -> [min(0, 0.5) = 0, -0.5]
    # group 2: a NaN (unscored) row gets 0; the other, wrong, lam = 0.5 - (8 - 6)/2 = -0.5 -> -0.5
    col = kimi([10, 20, 30, 5, 15, 6, 8], [4, 4, 4, 1, 1, 2, 2], [1.0, 0.0, 1.0, 0.0, 1.0, float("nan"), 0.0])
    torch.testing.assert_close(col, torch.tensor([0.5, 0.0, -0.5, 0.0, -0.5, 0.0, -0.5]))


def test_kimi_length_equal_lengths_add_zero():
    # max = min: the 0/0 case is 0 (our convention), correct or not
    assert torch.equal(kimi([7, 7, 7], [0, 0, 0], [1.0, 0.0, 1.0]), torch.zeros(3))


def test_kimi_length_row_order():
    lengths, gids, acc = [10, 20, 30, 5, 15, 9], [4, 4, 4, 1, 1, 1], [1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    perm = [5, 2, 0, 4, 1, 3]
    col = kimi(lengths, gids, acc)
    pc = kimi([lengths[i] for i in perm], [gids[i] for i in perm], [acc[i] for i in perm])
    torch.testing.assert_close(pc, col[perm])


def test_kimi_length_names_the_missing_metric():
    rows = LengthRows(group_ids=torch.zeros(2, dtype=torch.long), metrics={"format": torch.ones(2)})
    with pytest.raises(ValueError, match="metric 'accuracy' not among .* available: format"):
        build("length", "kimi_length")(torch.tensor([3, 4]), torch.zeros(2, dtype=torch.bool), 8, rows)
    with pytest.raises(ComponentError):
        build("length", {"name": "kimi_length", "metric": ""})


def test_length_rows_metrics_are_the_raw_columns_and_accuracy():
    # what length_shaping hands each length component: every raw column by name, and `accuracy`
    # = (correctness column == 1), NaN where unscored; no accuracy without a correctness reward
    from zoo.step.scoring import objective_metrics

    obj = torch.tensor([[1.0, 0.3], [0.5, 0.2], [float("nan"), 0.1]])
    m = objective_metrics(obj, ["correctness", "other"], 0)
    assert sorted(m) == ["accuracy", "correctness", "other"]
    torch.testing.assert_close(m["accuracy"], torch.tensor([1.0, 0.0, float("nan")]), equal_nan=True)
    assert "accuracy" not in objective_metrics(obj, ["correctness", "other"], None)
