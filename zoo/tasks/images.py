"""A synthetic image task drawn deterministically with PIL (issue 32 §2): each row's prompt asks about
one picture, which the row carries under `images` beside its chat `prompt` (zoo.core.media).

    {name: image_shapes, question: count, size: 512, eval_size: 64, seed: 0}

question "count": 1..max_count filled shapes (circle, square, triangle), each of its own colour, in
    distinct cells of a 3 x 3 grid; "How many shapes are in the image?", answer the count.
question "larger": two different digits drawn side by side in black; "Which number in the image is
    larger?", answer the larger digit.

Answers are integers, so the built-in `correctness` reward (math-verify on the final \\boxed{} answer,
else the last number) scores them unchanged. A problem is its drawing's parameters (count, shapes,
colours, cells; or the two digits and their order); eval rows are drawn first (seed `eval_seed`,
default `derive_seed(seed, "eval")`), distinct, and training rows never repeat an eval problem
(`zoo.tasks.base` explains the order). Row: {"prompt", "question", "answer", "source":
"image_shapes:<question>", "id", "images": [a PIL RGB image of image_size x image_size]}.

Bounds (our choice), checked before anything is drawn: `image_size` 16..1024 pixels a side: 16 keeps a
shape or digit legible, and above ~1002 x 1002 Qwen2-VL's processor scales a picture down anyway (its
default max_pixels = 28 * 28 * 1280, transformers' image_processing_qwen2_vl.py), so a larger side only
costs memory. Every row's picture is drawn at load and held (PIL keeps RGB at 4 bytes a pixel), so
(size + eval_size) x image_size^2 x 4 bytes must stay <= 4 GiB (`MAX_IMAGE_BYTES`; 1024 rows at 1024
pixels, 262,144 at the default 64). `eval_size` is at most the number of distinct problems (`larger`:
90 ordered pairs of different digits; `count`: sum over k <= max_count of C(9, k) * 12^k) less one,
so training has a problem left.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

from zoo.tasks.base import Task, TaskError, check_int, check_keys, derive_seed
from zoo.tasks.fewshot import DEFAULT_INSTRUCTION, user_content

QUESTIONS = {"count": "How many shapes are in the image?", "larger": "Which number in the image is larger?"}
SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (220, 30, 30), "green": (30, 160, 60), "blue": (40, 70, 220), "orange": (240, 140, 20)}
DEFAULTS: dict[str, Any] = {
    "name": "image_shapes",
    "question": "count",
    "size": 512,
    "eval_size": 64,
    "seed": 0,
    "eval_seed": None,
    "max_count": 4,
    "image_size": 64,
    "system": None,
    "instruction": DEFAULT_INSTRUCTION,
}
_GRID = 3  # cells per side for the shapes
IMAGE_SIDE = (16, 1024)  # image_size's range (module doc)
MAX_IMAGE_BYTES = 4 * 2**30  # every drawn picture held at load: at most 4 GiB of pixels (module doc)


def _problem(rng: random.Random, question: str, max_count: int) -> tuple:
    """A drawing's parameters: ("count", ((shape, colour, cell), ...)) or ("larger", (a, b))."""
    if question == "larger":
        a, b = rng.sample(range(10), 2)
        return ("larger", (a, b))
    k = rng.randint(1, max_count)
    cells = rng.sample(range(_GRID * _GRID), k)
    return ("count", tuple((rng.choice(SHAPES), rng.choice(sorted(COLOURS)), c) for c in sorted(cells)))


def draw(problem: tuple, side: int):
    """The PIL RGB image (side x side, white background) of a problem; deterministic."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (side, side), (255, 255, 255))
    d = ImageDraw.Draw(img)
    kind, parts = problem
    if kind == "larger":
        for i, digit in enumerate(parts):  # bitmap font, scaled up: legible at any side
            glyph = Image.new("L", (6, 11), 0)
            ImageDraw.Draw(glyph).text((0, 0), str(digit), fill=255)
            big = glyph.resize((side * 3 // 8, side * 2 // 3), Image.NEAREST)
            img.paste((0, 0, 0), (side // 16 + i * side // 2, side // 6), big)
        return img
    cell = side / _GRID
    for shape, colour, c in parts:
        x0, y0 = (c % _GRID) * cell + cell * 0.15, (c // _GRID) * cell + cell * 0.15
        x1, y1 = x0 + cell * 0.7, y0 + cell * 0.7
        fill = COLOURS[colour]
        if shape == "circle":
            d.ellipse((x0, y0, x1, y1), fill=fill)
        elif shape == "square":
            d.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            d.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
    return img


def _answer(problem: tuple) -> str:
    kind, parts = problem
    return str(max(parts)) if kind == "larger" else str(len(parts))


def _rows(s: dict, role: str, n: int, exclude: set) -> tuple[list[dict[str, Any]], set]:
    """n problems from role's seed (eval: distinct), none in `exclude`, as rows (their images drawn),
    and the set of their problems."""
    seed = s["eval_seed"] if role == "eval" and s["eval_seed"] is not None else derive_seed(s["seed"], role)
    rng, seen, rows = random.Random(seed), set(exclude), []
    for _ in range(100 * n + 1000):
        if len(rows) == n:
            break
        p = _problem(rng, s["question"], s["max_count"])
        if p in seen and role == "eval":
            continue
        if p in exclude:
            continue
        seen.add(p)
        rows.append(_row(s, p, f"{role}-{len(rows)}"))
    if len(rows) < n:
        raise TaskError(f"image_shapes: could only draw {len(rows)} of {n} {role} rows; lower size/eval_size")
    return rows, seen - exclude


def _row(s: dict, problem: tuple, rid: str) -> dict[str, Any]:
    q = QUESTIONS[s["question"]]
    msgs = ([{"role": "system", "content": s["system"]}] if s["system"] else []) + [
        {"role": "user", "content": user_content(q, s["instruction"])}
    ]
    return {
        "prompt": msgs,
        "question": q,
        "answer": _answer(problem),
        "source": f"image_shapes:{s['question']}",
        "id": f"image_shapes-{s['question']}-{rid}",
        "images": [draw(problem, s["image_size"])],
    }


def distinct_problems(question: str, max_count: int) -> int:
    """How many different problems `question` has: ordered pairs of different digits for `larger`, else
    the placements of 1..max_count shapes (C(9, k) cells, each one of 3 shapes x 4 colours)."""
    import math

    if question == "larger":
        return 10 * 9
    kinds = len(SHAPES) * len(COLOURS)
    return sum(math.comb(_GRID * _GRID, k) * kinds**k for k in range(1, max_count + 1))


def _check_bounds(s: dict) -> None:
    """The module doc's bounds on the pictures' memory and eval_size (image_size's range: `load`'s check_int);
    raises TaskError."""
    rows = s["size"] + s["eval_size"]
    need = rows * s["image_size"] ** 2 * 4  # bytes: PIL holds RGB at 4 bytes a pixel
    if need > MAX_IMAGE_BYTES:
        raise TaskError(
            f"image_shapes: task.size + task.eval_size = {rows} rows at task.image_size {s['image_size']} "
            f"would hold {need / 2**30:.1f} GiB of pictures, over the {MAX_IMAGE_BYTES // 2**30} GiB bound "
            f"(every row's picture is drawn at load); lower size, eval_size or image_size"
        )
    n = distinct_problems(s["question"], s["max_count"])
    top = n - 1  # size >= 1: one problem left for training
    if s["eval_size"] > top:
        raise TaskError(
            f"image_shapes task key 'eval_size' must be <= {top} (question {s['question']!r} has {n} distinct "
            f"problems; held-out problems are distinct and training keeps at least one), got {s['eval_size']}"
        )


def load(spec: Mapping[str, Any]) -> Task:
    """Load the image task (module docstring). Raises TaskError for an unknown key or question, sizes
    < 0 (size < 1), max_count outside 1..9, image_size outside 16..1024, pictures over 4 GiB, or
    eval_size over the distinct problems."""
    check_keys(spec, DEFAULTS, "image_shapes task")
    s = {**DEFAULTS, **spec}
    if s["question"] not in QUESTIONS:
        raise TaskError(
            f"image_shapes task key 'question' must be one of {', '.join(QUESTIONS)}, got {s['question']!r}"
        )
    check_int(s, "size", minimum=1)
    check_int(s, "eval_size", minimum=0)
    check_int(s, "seed", minimum=0)
    check_int(s, "eval_seed", minimum=0, allow_none=True)
    check_int(s, "image_size", minimum=IMAGE_SIDE[0], maximum=IMAGE_SIDE[1])
    check_int(s, "max_count", minimum=1, maximum=_GRID * _GRID)
    _check_bounds(s)
    ev, eval_problems = _rows(s, "eval", s["eval_size"], set())
    train, _ = _rows(s, "train", s["size"], eval_problems)
    return Task(name="image_shapes", train=train, eval=ev, spec=s)
