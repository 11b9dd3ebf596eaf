"""tta_alignment and tta_dispersion (zoo.rewards.tta) against hand-worked values."""

from __future__ import annotations

import pytest

from zoo.core import registry
from zoo.rewards.tta import tta_alignment, tta_dispersion

CLASSES = ["a", "b", "c"]
# two kept views x three classes: the frozen model's cosines
COS = [[0.3, -0.2, 0.1], [0.1, -0.4, 0.1]]


def rows(view: int = 0, n: int = 3) -> list[dict]:
    return [{"classes": CLASSES, "tta_ref_cos": COS, "tta_view": view}] * n


def test_alignment_is_2_5_times_the_clamped_cosine_of_the_rows_view():
    assert tta_alignment(["a", "b", "c"], rows()) == pytest.approx([0.75, 0.0, 0.25])  # 2.5 x (0.3, max(-0.2, 0), 0.1)
    assert tta_alignment(["a"], rows(view=1, n=1)) == pytest.approx([0.25])  # 2.5 x 0.1 on view 1
    assert tta_alignment(["a"], rows(n=1), scale=1.0) == pytest.approx([0.3])


def test_dispersion_is_minus_2_5_times_the_std_over_views():
    # a: (0.3, 0.1) -> mean 0.2, population std 0.1 -> -0.25; b: (-0.2, -0.4) -> -0.25; c: (0.1, 0.1) -> 0
    assert tta_dispersion(["a", "b", "c"], rows()) == pytest.approx([-0.25, -0.25, 0.0])


def test_dispersion_is_zero_with_one_view():
    one = [{"classes": CLASSES, "tta_ref_cos": [COS[0]]}]
    assert tta_dispersion(["a"], one) == [0.0]


def test_no_label_is_read():
    labelled = [{**r, "answer": "b"} for r in rows()]
    assert tta_alignment(["a", "b", "c"], labelled) == tta_alignment(["a", "b", "c"], rows())


def test_errors_name_the_missing_key_or_the_class():
    with pytest.raises(ValueError, match="'tta_ref_cos'"):
        tta_alignment(["a"], [{"classes": CLASSES}])
    with pytest.raises(ValueError, match="'z' is not one of the row's classes"):
        tta_dispersion(["z"], rows(n=1))


def test_registered_with_a_checked_scale():
    assert registry.build("reward", {"name": "tta_alignment", "scale": 1.0}).params == {"scale": 1.0}
    with pytest.raises(registry.ComponentError, match="scale must be >= 0"):
        registry.build("reward", {"name": "tta_dispersion", "scale": -1.0})
