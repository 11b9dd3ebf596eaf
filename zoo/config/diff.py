"""Comparisons of whole variants (no model loaded): `diff_variants` lists the resolved settings in
which two variants differ (`zoo diff`). The checks of a variant are in `zoo.checks`.
"""

from __future__ import annotations

from typing import Any

from zoo.config.variant import Variant


def diff_variants(a: Variant, b: Variant) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every resolved setting that differs."""
    fa, fb = _flatten(_comparable(a)), _flatten(_comparable(b))
    keys = sorted(set(fa) | set(fb), key=lambda k: (k.split(".")[0] != "group_size", k))

    def empty_vs_items(k: str) -> bool:  # `filter: []` against `filter.dynamic_sampling...`: the items say it
        return any(f.get(k) == [] and any(x.startswith(k + ".") for x in g) for f, g in ((fa, fb), (fb, fa)))

    return [(k, fa.get(k), fb.get(k)) for k in keys if fa.get(k) != fb.get(k) and not empty_vs_items(k)]


def _comparable(v: Variant) -> dict[str, Any]:
    return {
        "group_size": v.group_size,
        "updates": v.updates.model_dump(),
        **({"critic_warmup": v.critic_warmup} if v.critic_warmup else {}),
        "slots": v.resolved(),
    }


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, val in d.items():
            out.update(_flatten(val, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    if isinstance(d, list):
        if all(isinstance(x, dict) and "name" in x for x in d):
            out = {}
            for x in d:
                params = {k: v for k, v in x.items() if k != "name"}
                out.update(_flatten(params, f"{prefix}{x['name']}.") if params else {f"{prefix}{x['name']}": "on"})
            return out or {prefix.rstrip("."): []}
        return {prefix.rstrip("."): d}
    return {prefix.rstrip("."): d}
