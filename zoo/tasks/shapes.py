"""A synthetic image set for test-time adaptation (issue 32 §3): coloured shapes drawn with PIL, deterministic.

    rows = shape_rows(size=30, seed=0)                              # labelled: each row has its "answer"
    rows = shape_rows(size=30, seed=0, labelled=False, shift="noise", severity=3)
    rows[0] -> {"prompt": "", "images": [<PIL.Image 32x32>], "answer": "red circle",
                "classes": ["red circle", ...], "source": "tta_shapes", "id": "tta_shapes-0-0"}

A class is `"<colour> <shape>"` (3 colours x 3 shapes = 9 classes by default; `classes()` lists them in
a fixed order). An image is one shape on a grey background, its centre and size jittered by the row's
own generator (`derive_seed(seed, "tta_shapes:<i>")`), so a row is the same whichever other rows are
drawn. Shifts (ImageNet-C in spirit, arXiv 1903.12261, not its code; the levels are our choice): `noise`
(Gaussian pixel noise), `blur` (Gaussian blur), `contrast` (contrast reduced toward grey), `colour` (a
warm colour cast: red gain 1 + a, blue gain 1 - a), `background` (the grey background blended toward
a smooth random colour field never seen in pre-training), each at severity 0..5 (0 = clean).
`prompt` is empty: a dual encoder reads only the image; the class names are the completions. The
`images` key is the shared convention of issue 32 (a list of PIL images beside the prompt).
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from zoo.tasks.base import TaskError, derive_seed

COLOURS: dict[str, tuple[int, int, int]] = {"red": (220, 30, 30), "green": (30, 180, 30), "blue": (30, 60, 220)}
SHAPES = ("circle", "square", "triangle")
SHIFTS = ("none", "noise", "blur", "contrast", "colour", "background")
BACKGROUND = (128, 128, 128)
# per severity 1..5 (our choice, rising like ImageNet-C's five levels)
_NOISE_STD = (8.0, 16.0, 28.0, 42.0, 60.0)  # pixel units (0..255)
_BLUR_RADIUS = (0.5, 1.0, 1.5, 2.0, 3.0)
_CONTRAST = (0.8, 0.6, 0.45, 0.3, 0.2)  # PIL ImageEnhance.Contrast factor (1 = unchanged)
_CAST = (0.12, 0.24, 0.36, 0.48, 0.6)  # colour cast: channel gains (1 + a, 1, 1 - a), a warm white balance
_BACKDROP = (0.2, 0.4, 0.6, 0.8, 1.0)  # weight of the new background against the grey one
_BACKDROP_GRID = 4  # the new background: a 4 x 4 grid of random colours, bicubically upsampled


def classes() -> list[str]:
    """Every class name, colours outer, shapes inner: ["red circle", "red square", ...]."""
    return [f"{c} {s}" for c in COLOURS for s in SHAPES]


def draw(label: str, rng: random.Random, size: int = 32) -> Image.Image:
    """One `size` x `size` RGB image of class `label` ("red circle"), its box jittered by `rng`."""
    colour, shape = label.split(" ")
    img = Image.new("RGB", (size, size), BACKGROUND)
    half = rng.uniform(0.22, 0.34) * size  # half the shape's extent
    cx, cy = (rng.uniform(half, size - half) for _ in range(2))
    box = (cx - half, cy - half, cx + half, cy + half)
    pen = ImageDraw.Draw(img)
    fill = COLOURS[colour]
    if shape == "circle":
        pen.ellipse(box, fill=fill)
    elif shape == "square":
        pen.rectangle(box, fill=fill)
    else:
        pen.polygon([(cx, cy - half), (cx - half, cy + half), (cx + half, cy + half)], fill=fill)
    return img


def apply_shift(img: Image.Image, shift: str, severity: int, rng: random.Random) -> Image.Image:
    """`img` under `shift` at `severity` (0 or shift "none": unchanged). Noise and backgrounds draw from `rng`."""
    if shift == "none" or severity == 0:
        return img
    level = severity - 1
    if shift == "blur":
        return img.filter(ImageFilter.GaussianBlur(_BLUR_RADIUS[level]))
    if shift == "contrast":
        return ImageEnhance.Contrast(img).enhance(_CONTRAST[level])
    x = np.asarray(img, dtype=np.float64)  # [H, W, 3]
    if shift == "colour":
        x = x * np.array([1 + _CAST[level], 1.0, 1 - _CAST[level]])
    elif shift == "background":
        x = _new_background(x, _BACKDROP[level], np.random.default_rng(rng.getrandbits(32)))
    else:
        x = x + np.random.default_rng(rng.getrandbits(32)).normal(0.0, _NOISE_STD[level], x.shape)
    return Image.fromarray(np.clip(x, 0, 255).round().astype(np.uint8))


def _new_background(x: np.ndarray, weight: float, gen: np.random.Generator) -> np.ndarray:
    """x [H, W, 3] with its grey background pixels (exactly BACKGROUND: PIL draws the shapes without
    anti-aliasing) blended toward a smooth random colour field by `weight` (1: the field alone)."""
    h, w, _ = x.shape
    grid = gen.integers(0, 256, (_BACKDROP_GRID, _BACKDROP_GRID, 3), dtype=np.uint8)
    field = np.asarray(Image.fromarray(grid).resize((w, h), Image.Resampling.BICUBIC), dtype=np.float64)
    is_bg = (x == np.array(BACKGROUND)).all(axis=-1, keepdims=True)  # [H, W, 1]
    return np.where(is_bg, (1 - weight) * x + weight * field, x)


def shape_rows(
    size: int,
    seed: int = 0,
    *,
    labelled: bool = True,
    shift: str = "none",
    severity: int = 0,
    image_size: int = 32,
) -> list[dict[str, Any]]:
    """`size` rows cycling through the classes (row i has class i mod 9), each with one image in
    `images`; `answer` only when `labelled`. Raises TaskError naming the bad key and allowed values."""
    if shift not in SHIFTS:
        raise TaskError(f"tta_shapes key 'shift' must be one of {', '.join(SHIFTS)}, got {shift!r}")
    if not isinstance(severity, int) or not 0 <= severity <= 5:
        raise TaskError(f"tta_shapes key 'severity' must be an integer 0..5, got {severity!r}")
    if not isinstance(size, int) or size < 1:
        raise TaskError(f"tta_shapes key 'size' must be an integer >= 1, got {size!r}")
    names = classes()
    rows = []
    for i in range(size):
        rng = random.Random(derive_seed(seed, f"tta_shapes:{i}"))
        label = names[i % len(names)]
        img = apply_shift(draw(label, rng, image_size), shift, severity, rng)
        row: dict[str, Any] = {"prompt": "", "images": [img], "classes": names, "source": "tta_shapes"}
        row["id"] = f"tta_shapes-{seed}-{i}"
        if labelled:
            row["answer"] = label
        rows.append(row)
    return rows


def random_views(img: Image.Image, n: int, rng: random.Random, min_scale: float = 0.5) -> list[Image.Image]:
    """`img` itself, then n - 1 augmented views: a random resized crop (area fraction in
    [min_scale, 1], aspect ratio in [3/4, 4/3]) back to the image's size, flipped left-right with
    probability 1/2. TPT (arXiv 2209.07511 §4) augments ImageNet test images with random resized crops
    and keeps the original among its views; the PIL code and `min_scale` 0.5 are our choice."""
    w, h = img.size
    out = [img]
    for _ in range(n - 1):
        area = rng.uniform(min_scale, 1.0) * w * h
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = min(w, round(math.sqrt(area * ratio))), min(h, round(math.sqrt(area / ratio)))
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        view = img.resize((w, h), Image.Resampling.BICUBIC, box=(x, y, x + cw, y + ch))
        out.append(view.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else view)
    return out
