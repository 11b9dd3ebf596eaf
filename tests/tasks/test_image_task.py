"""The image_shapes task (zoo.tasks.images): drawn deterministically with PIL, answers that match the
drawing, eval rows never repeated in training, bad keys refused."""

import pytest

from zoo.tasks import TaskError, known_tasks, load_task
from zoo.tasks.images import COLOURS, draw


def _pixels(img) -> bytes:
    return img.tobytes()


def test_rows_carry_one_image_beside_the_chat_prompt_and_repeat_exactly():
    a = load_task({"name": "image_shapes", "size": 16, "eval_size": 4})
    b = load_task({"name": "image_shapes", "size": 16, "eval_size": 4})
    assert "image_shapes" in known_tasks()
    row = a.train[0]
    assert row["prompt"][-1]["role"] == "user" and "How many shapes" in row["prompt"][-1]["content"]
    assert len(row["images"]) == 1 and row["images"][0].size == (64, 64)
    assert [r["answer"] for r in a.train] == [r["answer"] for r in b.train]
    assert all(_pixels(x["images"][0]) == _pixels(y["images"][0]) for x, y in zip(a.train, b.train))


def test_the_count_answer_is_the_number_of_shapes_drawn():
    problem = ("count", (("square", "red", 0), ("circle", "blue", 4), ("triangle", "green", 8)))
    img = draw(problem, 48)
    px = {c for _, c in img.getcolors(48 * 48)}  # the colours present
    for colour in ("red", "blue", "green"):
        assert COLOURS[colour] in px  # each shape is there in its own colour
    assert COLOURS["orange"] not in px
    assert img.getpixel((24, 24)) == COLOURS["blue"]  # the circle fills the middle cell
    assert img.getpixel((8, 40)) == (255, 255, 255)  # cell 6 is empty
    rows = load_task({"name": "image_shapes", "size": 64, "eval_size": 0, "max_count": 2}).train
    assert {r["answer"] for r in rows} == {"1", "2"}


def test_larger_answers_the_larger_digit_and_eval_problems_stay_out_of_training():
    t = load_task({"name": "image_shapes", "question": "larger", "size": 60, "eval_size": 20})
    assert all(r["answer"] in "123456789" for r in t.train + t.eval)
    seen = {_pixels(r["images"][0]) for r in t.eval}
    assert len(seen) == 20  # distinct eval drawings
    assert not any(_pixels(r["images"][0]) in seen for r in t.train)


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"question": "colour"}, "'question' must be one of count, larger"),
        ({"max_count": 10}, "'max_count' must be an integer in 1..9, got 10"),
        ({"max_count": 0}, "'max_count' must be an integer in 1..9, got 0"),
        ({"sizee": 3}, "did you mean 'size'"),
        ({"question": "larger", "eval_size": 90}, "'eval_size' must be <= 89 \\(question 'larger' has 90 distinct"),
        ({"max_count": 1, "eval_size": 108}, "'eval_size' must be <= 107 \\(question 'count' has 108 distinct"),
        ({"image_size": 1025}, "'image_size' must be an integer in 16..1024"),
        ({"image_size": 15}, "'image_size' must be an integer in 16..1024, got 15"),
        ({"image_size": 64.5}, "'image_size' must be an integer in 16..1024, got 64.5"),
    ],
)
def test_bad_specs_name_the_key(spec, match):
    with pytest.raises(TaskError, match=match):
        load_task({"name": "image_shapes", "size": 4, **spec})


def test_the_bounds_admit_their_edges():
    """image_size 1024 (the top of the range) and 1024 rows of it (exactly the 4 GiB bound) pass the
    checks: the bound is checked before drawing, so a spec at the edge is only refused past it."""
    from zoo.tasks.images import MAX_IMAGE_BYTES, _check_bounds, distinct_problems

    assert distinct_problems("count", 2) == 9 * 12 + 36 * 12**2  # C(9,1) 12 + C(9,2) 12^2 = 5292
    s = {"image_size": 1024, "size": 1000, "eval_size": 24, "question": "count", "max_count": 4}
    assert s["image_size"] ** 2 * 4 * 1024 == MAX_IMAGE_BYTES
    _check_bounds(s)  # no error at the edge
    with pytest.raises(TaskError, match="1025 rows"):
        _check_bounds({**s, "size": 1001})


def test_an_hf_task_with_an_image_column_carries_its_images(tmp_path):
    import datasets
    from PIL import Image

    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (9, 9, 9), (200, 200, 0), (0, 90, 90)]
    ds = datasets.Dataset.from_dict(
        {
            "problem": ["<image>Find x."] * 6,  # one text about six figures: six problems
            "answer": [str(i) for i in range(6)],
            "images": [[Image.new("RGB", (8, 8), c)] for c in colours],
        },
        features=datasets.Features(
            {"problem": datasets.Value("string"), "answer": datasets.Value("string"), "images": [datasets.Image()]}
        ),
    )
    path = tmp_path / "geo.parquet"
    ds.to_parquet(str(path))
    t = load_task(
        {"name": "jsonl", "path": str(path), "prompt_column": "problem", "image_column": "images", "eval_size": 2}
    )
    assert len(t.eval) == 2 and len(t.train) == 4  # distinct by picture, not by the shared text
    rows = t.train + t.eval
    assert sorted(r["answer"] for r in rows) == ["0", "1", "2", "3", "4", "5"]
    assert all(r["question"] == "Find x." and len(r["images"]) == 1 for r in rows)
    assert {r["images"][0].convert("RGB").getpixel((0, 0)) for r in rows} == set(colours)
    with pytest.raises(TaskError, match="no column 'pics' \\(image_column\\)"):
        load_task({"name": "jsonl", "path": str(path), "prompt_column": "problem", "image_column": "pics"})
