"""The tta_shapes images (zoo.tasks.shapes): deterministic, labelled or not, shifts, views."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from zoo.tasks.base import TaskError
from zoo.tasks.shapes import BACKGROUND, COLOURS, classes, random_views, shape_rows


def test_classes_are_colour_shape_pairs_in_a_fixed_order():
    assert classes()[:4] == ["red circle", "red square", "red triangle", "green circle"]
    assert len(classes()) == 9 and len(set(classes())) == 9


def test_rows_are_deterministic_and_cycle_the_classes():
    a, b = shape_rows(10, seed=3), shape_rows(10, seed=3)
    assert [r["answer"] for r in a] == [classes()[i % 9] for i in range(10)]
    assert all(x["images"][0].tobytes() == y["images"][0].tobytes() for x, y in zip(a, b))
    assert a[0]["images"][0].tobytes() != shape_rows(10, seed=4)[0]["images"][0].tobytes()
    assert a[0]["images"][0].size == (32, 32) and a[0]["classes"] == classes()


def test_the_shape_is_drawn_in_its_colour():
    for row in shape_rows(9, seed=0):
        img = row["images"][0]
        counts = Counter(zip(*[iter(img.tobytes())] * 3))  # RGB pixels
        ink = [c for c, _ in counts.most_common() if c != BACKGROUND][0]
        assert ink == COLOURS[row["answer"].split()[0]]


def test_unlabelled_rows_have_no_answer():
    row = shape_rows(2, seed=0, labelled=False)[0]
    assert "answer" not in row and row["images"] and row["prompt"] == ""


@pytest.mark.parametrize("shift", ["noise", "blur", "contrast"])
def test_a_shift_changes_pixels_and_severity_0_is_clean(shift):
    clean = shape_rows(1, seed=0)[0]["images"][0].tobytes()
    assert shape_rows(1, seed=0, shift=shift, severity=0)[0]["images"][0].tobytes() == clean
    assert shape_rows(1, seed=0, shift=shift, severity=3)[0]["images"][0].tobytes() != clean


def test_bad_keys_name_the_key_and_the_allowed_values():
    with pytest.raises(TaskError, match="'shift' must be one of none, noise, blur, contrast"):
        shape_rows(1, shift="fog")
    with pytest.raises(TaskError, match="'severity' must be an integer 0..5"):
        shape_rows(1, shift="noise", severity=6)


def test_views_keep_the_original_first_and_the_size():
    img = shape_rows(1, seed=0)[0]["images"][0]
    views = random_views(img, 5, random.Random(0))
    assert len(views) == 5 and views[0] is img and all(v.size == img.size for v in views)
    assert any(v.tobytes() != img.tobytes() for v in views[1:])
