"""Label-free rewards for test-time adaptation of a `dual_encoder` policy (issue 32 §3, GRPO-TTA).

GRPO-TTA (arXiv 2605.03403) names "alignment rewards and dispersion rewards" in its abstract; its
formulas and code are not public. These two are zoo's reconstruction, written so that each can be
checked by hand. A completion is a class name; its row (one per completion) carries what a frozen
reward model (a CLIP that never adapts) measured on the completion's image, before any update:

    row["classes"]       the C class names
    row["tta_ref_cos"]   [V][C] cosine(view v of the image, class prompt c) under the frozen model,
                         for the V views of the image that were kept
    row["tta_view"]      which of the V views this completion was drawn for (default 0)

- `tta_alignment`: R(c) = scale * max(cos_ref(view, c), 0). RLCF's CLIP reward (arXiv 2305.18010,
  code `CLIPRewards.CLIPScore`: `clipscore_weight` 2.5, clamped at 0); RLCF subtracts the mean over the
  K candidates, which here is the advantage slot's group mean (`group_mean`), not the reward's job.
- `tta_dispersion`: R(c) = -scale * std_v cos_ref(v, c) (population std over the V kept views):
  a candidate the image's views disagree on is dispersed and scores low; one the views agree on
  scores 0. Zoo's choice (the abstract gives no formula). With one view it is 0 for every class, so it
  then adds nothing.

Neither reads a label: `answer` is never looked at.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from zoo.core.registry import register


def _cosines(completion: str, row: Mapping[str, Any]) -> list[float]:
    """The frozen model's cosines of `completion`'s class over the row's views, [V]. Raises ValueError
    naming the missing key or the unknown class."""
    for key in ("classes", "tta_ref_cos"):
        if key not in row:
            raise ValueError(f"tta rewards need rows of a dual_encoder rollout (a row without {key!r})")
    classes = list(row["classes"])
    if completion not in classes:
        raise ValueError(f"tta rewards: completion {completion!r} is not one of the row's classes {classes}")
    c = classes.index(completion)
    return [float(view[c]) for view in row["tta_ref_cos"]]


def _check_scale(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["scale"] < 0:
        raise ValueError(f"scale must be >= 0, got {params['scale']}")


@register("reward", "tta_alignment", check=_check_scale, discrete=False)
def tta_alignment(completions: list[str], rows: list[dict], *, scale: float = 2.5) -> list[float | None]:
    """R = scale * max(cos_ref(x_view, prompt_c), 0) (module doc; RLCF's CLIPScore weight 2.5).
    completions, rows: N each. Returns N values."""
    out: list[float | None] = []
    for comp, row in zip(completions, rows, strict=True):
        cos = _cosines(comp, row)
        out.append(scale * max(cos[int(row.get("tta_view", 0))], 0.0))
    return out


@register("reward", "tta_dispersion", check=_check_scale, discrete=False)
def tta_dispersion(completions: list[str], rows: list[dict], *, scale: float = 2.5) -> list[float | None]:
    """R = -scale * std over the kept views of cos_ref(view, prompt_c) (module doc; zoo's choice).
    completions, rows: N each. Returns N values."""
    out: list[float | None] = []
    for comp, row in zip(completions, rows, strict=True):
        cos = _cosines(comp, row)
        mean = sum(cos) / len(cos)
        out.append(-scale * math.sqrt(sum((v - mean) ** 2 for v in cos) / len(cos)))
    return out
