"""Length shaping: case C12 (DAPO eq. 13), parameter checks, overlong filtering."""
import pytest
import torch

from zoo.components.length import overlong_filter, overlong_soft
from zoo.components.types import LengthResult
from zoo.registry import ComponentError, available, build

LENGTHS = torch.tensor([100, 384, 448, 512, 600])


def test_registered():
    assert available("length") == ["overlong_filter", "overlong_soft"]


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
