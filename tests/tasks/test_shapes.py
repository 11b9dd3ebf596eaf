"""The tta_shapes images (zoo.tasks.shapes): deterministic, labelled or not, shifts, views."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from zoo.tasks.base import TaskError
from zoo.tasks.shapes import BACKGROUND, COLOURS, apply_shift, classes, draw, random_views, shape_rows


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


@pytest.mark.parametrize("shift", ["noise", "blur", "contrast", "colour", "background"])
def test_a_shift_changes_pixels_and_severity_0_is_clean(shift):
    clean = shape_rows(1, seed=0)[0]["images"][0].tobytes()
    assert shape_rows(1, seed=0, shift=shift, severity=0)[0]["images"][0].tobytes() == clean
    assert shape_rows(1, seed=0, shift=shift, severity=3)[0]["images"][0].tobytes() != clean


def test_bad_keys_name_the_key_and_the_allowed_values():
    with pytest.raises(TaskError, match="'shift' must be one of none, noise, blur, contrast, colour, background"):
        shape_rows(1, shift="fog")
    with pytest.raises(TaskError, match="'severity' must be an integer 0..5"):
        shape_rows(1, shift="noise", severity=6)


def test_views_keep_the_original_first_and_the_size():
    img = shape_rows(1, seed=0)[0]["images"][0]
    views = random_views(img, 5, random.Random(0))
    assert len(views) == 5 and views[0] is img and all(v.size == img.size for v in views)
    assert any(v.tobytes() != img.tobytes() for v in views[1:])


def test_colour_cast_scales_red_up_and_blue_down_by_the_severity():
    img = draw("green square", random.Random(0))  # background (128, 128, 128), ink (30, 180, 30)
    px = Counter(zip(*[iter(apply_shift(img, "colour", 5, random.Random(0)).tobytes())] * 3))
    assert (205, 128, 51) in px  # grey x (1.6, 1, 0.4), rounded: 204.8 -> 205, 51.2 -> 51
    assert (48, 180, 12) in px  # the ink x (1.6, 1, 0.4)


def test_new_background_keeps_the_shape_and_replaces_the_grey():
    img = draw("blue circle", random.Random(0))
    before = list(zip(*[iter(img.tobytes())] * 3))
    after = list(zip(*[iter(apply_shift(img, "background", 5, random.Random(1)).tobytes())] * 3))
    ink = COLOURS["blue"]
    assert [a for b, a in zip(before, after) if b == ink] == [ink] * before.count(ink)  # the shape is untouched
    bg_after = [a for b, a in zip(before, after) if b == BACKGROUND]
    assert sum(a != BACKGROUND for a in bg_after) > 0.9 * len(bg_after)  # severity 5: the new field alone
    mild = list(zip(*[iter(apply_shift(img, "background", 1, random.Random(1)).tobytes())] * 3))
    dist = lambda px: sum(abs(c - 128) for p, b in zip(px, before) if b == BACKGROUND for c in p)  # noqa: E731
    assert 0 < dist(mild) < dist(after)  # the same field at weight 0.2 lies closer to the grey
