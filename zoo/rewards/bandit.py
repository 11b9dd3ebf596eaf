"""Bandit rewards: a completion is an arm (its text, one token of `model: "arms:a,b"`), each reward a
distribution per arm whose noise is drawn from the task row (`zoo.tasks.bandit`).

    rewards:
      - {name: arm_bernoulli, p: {a: 0.9, b: 0.1}}                  # R1 ~ Bernoulli(p[arm])
      - {name: arm_gaussian, mean: {a: 0.0, b: 5.0}, std: 10.0}     # R2 ~ N(mean[arm], std^2) / scale

Noise: completion j of a group (the j-th row with that row's `id` in the call) uses
`numpy.random.default_rng([noise_seed, j, stream])`, stream 0 for Bernoulli (u ~ U(0,1), R1 = 1[u < p])
and 1 for Gaussian (z ~ N(0,1), R2 = (mean + std z) / scale). The same (row, j) gets the same u and z
whichever arm was pulled (common random numbers), so arms of a study pair by seed. A completion
that pulls no arm is unscored (None; `missing:` gives it a value instead). The arm is the
completion's first character (the whole completion under `arms:a,b`; the first token under
`arms:a,b+eos`, whose completions ramble on). `arm_bernoulli` judges correctness (1 = correct:
`accuracy`, `completion/len_correct|len_incorrect`). Source: the MO-GRPO bandit domain, arXiv:2509.22047 §5.1.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Mapping

import numpy as np

from zoo.core.registry import register


def _draws(rows: list[dict], stream: int, kind: str) -> list[float]:
    """One U(0,1) ('uniform') or N(0,1) ('normal') value per row, from (noise_seed, j, stream)."""
    seen: Counter[str] = Counter()
    out = []
    for r in rows:
        if "noise_seed" not in r:
            raise ValueError("bandit rewards need rows of the `bandit` task (a row without 'noise_seed')")
        j = seen[r["id"]]
        seen[r["id"]] += 1
        rng = np.random.default_rng([int(r["noise_seed"]), j, stream])
        out.append(float(rng.random() if kind == "uniform" else rng.standard_normal()))
    return out


def _check_per_arm(values: Any, key: str) -> None:
    if not isinstance(values, Mapping) or not values:
        raise ValueError(f"{key} must map each arm to a number, e.g. {{a: 0.9, b: 0.1}}, got {values!r}")
    for arm, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{key}.{arm} must be a finite number, got {v!r}")


def _check_bernoulli(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _check_per_arm(params["p"], "p")
    bad = {a: v for a, v in params["p"].items() if not 0 <= v <= 1}
    if bad:
        raise ValueError(f"p must be in [0, 1] for each arm, got {bad}")


def _check_gaussian(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _check_per_arm(params["mean"], "mean")
    if not params["std"] >= 0:
        raise ValueError(f"std must be >= 0, got {params['std']}")
    if not params["scale"] > 0:
        raise ValueError(f"scale must be > 0, got {params['scale']}")


@register("reward", "arm_bernoulli", check=_check_bernoulli, discrete=True, accuracy=True)
def arm_bernoulli(
    completions: list[str], rows: list[dict], *, p: Mapping[str, float], missing: float | None = None
) -> list[float | None]:
    """R = 1.0 if u < p[arm] else 0.0, u ~ U(0, 1) from the row, arm = the completion's first
    character (module docstring); `missing` for a completion that pulls no key of `p`.
    completions, rows: N each. Returns N values."""
    u = _draws(rows, 0, "uniform")
    return [missing if c[:1] not in p else float(ui < p[c[:1]]) for c, ui in zip(completions, u, strict=True)]


@register("reward", "arm_gaussian", check=_check_gaussian, discrete=False)
def arm_gaussian(
    completions: list[str], rows: list[dict], *, mean: Mapping[str, float], std: float = 1.0, scale: float = 1.0
) -> list[float | None]:
    """R = (mean[arm] + std z) / scale, z ~ N(0, 1) from the row, arm = the completion's first
    character (module docstring); None for a completion that pulls no key of `mean`.
    completions, rows: N each. Returns N values."""
    z = _draws(rows, 1, "normal")
    return [
        None if c[:1] not in mean else (mean[c[:1]] + std * zi) / scale for c, zi in zip(completions, z, strict=True)
    ]
