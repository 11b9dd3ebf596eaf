"""The study file's `baseline:` checked against the arms the study makes (variants, ablations, and with
a `sweep` every sweep point of each): an unknown name is an error at validate, with the close names
(difflib, zoo.config.overrides.did_you_mean), for a label with a seed suffix ("grpo-s0") the arm
name without it, and for a variant swept over ("grpo" with sweep group_size) its sweep points' arms."""

from __future__ import annotations

import re

from zoo.config.overrides import did_you_mean
from zoo.config.variant import VariantError

SEED_SUFFIX = re.compile(r"-s(-?\d+)$")


def check_baseline(baseline: str | None, arms: list[str], where: str) -> None:
    """Raise VariantError "<where>: key 'baseline': 'x' is not an arm of this study (known: ...)" with a
    hint, unless `baseline` is None or one of `arms` (arm names without -s<seed>)."""
    if baseline is None or baseline in arms:
        return
    bare = SEED_SUFFIX.sub("", baseline)
    if bare != baseline and bare in arms:
        hint = f"; drop the seed suffix: baseline: {bare} (an arm is compared over all its seeds)"
    elif points := [a for a in arms if a.startswith(f"{baseline}-")]:
        hint = f"; with a sweep the baseline is one sweep point's arm: {' or '.join(points)}"
    else:
        hint = did_you_mean(baseline, arms)  # " (did you mean 'grpo'?)"
    raise VariantError(
        f"{where}: key 'baseline': {baseline!r} is not an arm of this study (known: {', '.join(arms)}){hint}"
    )
