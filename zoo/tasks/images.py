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


def load(spec: Mapping[str, Any]) -> Task:
    """Load the image task (module docstring). Raises TaskError for an unknown key or question, sizes
    < 0 (size < 1), max_count outside 1..9, image_size < 16, or too few distinct problems."""
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
    check_int(s, "image_size", minimum=16)
    check_int(s, "max_count", minimum=1)
    if s["max_count"] > _GRID * _GRID:
        raise TaskError(f"image_shapes task key 'max_count' must be <= {_GRID * _GRID}, got {s['max_count']}")
    ev, eval_problems = _rows(s, "eval", s["eval_size"], set())
    train, _ = _rows(s, "train", s["size"], eval_problems)
    return Task(name="image_shapes", train=train, eval=ev, spec=s)
