"""What `zoo validate` and `zoo tta` check in a `zoo tta` file before any model is built (issue 32 §3).

Errors (each names the file and the key): the schema (`zoo.config.tta`), a variant whose slots a
label-free one-class update cannot use (`zoo.step.tta.tta_slots`), a reward that does not resolve,
a group larger than the number of classes. Warnings: `tta_dispersion` with one kept view (it is then
0 for every class), a reward that is not one of the label-free ones (`correctness` reads the
answer). Notes: the clip does nothing with one update per rollout (ratio 1). The variant and reward
checks apply to `method: variant` only: `method: tpt` (TPT arXiv 2209.07511 eq. 3, the entropy of the
mean prediction) reads neither, so a study's `tpt` arm is not held to them (`zoo.run.tta.variant_context`).
"""

from __future__ import annotations

import math
from typing import Any

from zoo.checks.registry import Report
from zoo.config.tta import TTAFile, TTASpec, parse_tta, study_arms
from zoo.config.variant import VariantError, load_variant
from zoo.core.registry import ComponentError
from zoo.rewards.compute import resolve_rewards
from zoo.step.tta import tta_slots
from zoo.tasks.shapes import classes

_LABEL_FREE = ("tta_alignment", "tta_dispersion")


def check_tta_data(data: Any, where: str) -> tuple[Report, TTAFile | None]:
    """The Report of a parsed `zoo tta` mapping, and the validated file when it has no error. A study
    file (`study:`) has each arm checked as its own `tta:` mapping, named `study.arms[i]`."""
    rep = Report()
    try:
        f = parse_tta(data, where)
        arms = study_arms(f, where) if f.study is not None else [("", f.tta)]
    except VariantError as e:
        rep.errors.append(str(e))
        return rep, None
    for name, cfg in arms:
        at = f"{where} (arm {name})" if name else where
        _check_spec(rep, cfg, at)
    if f.study is not None and not (f.study.clean or f.study.shifts):
        rep.errors.append(
            f"{where}: keys 'study.clean' and 'study.shifts': no condition to run (clean is false, no shift)"
        )
    if f.study is not None and len(f.study.seeds) < 5:
        rep.warnings.append(f"{where}: key 'study.seeds': {len(f.study.seeds)} seeds; intervals need >= 5")
    return rep, (f if rep.ok else None)


def _check_spec(rep: Report, cfg: TTASpec, where: str) -> None:
    if cfg.method == "tpt":  # TPT's loss is the entropy of the mean prediction: no variant, no rewards read
        return
    try:
        v = load_variant(cfg.variant)
        clip = tta_slots(v).clip.name
    except VariantError as e:
        rep.errors.append(f"{where}: key 'tta.variant': {e}")
        return
    try:
        rewards = resolve_rewards(cfg.rewards)
    except (ComponentError, ValueError) as e:
        rep.errors.append(f"{where}: key 'tta.rewards': {e}")
        return
    n_classes = len(classes())
    if v.group_size > n_classes:
        rep.errors.append(
            f"{where}: key 'tta.variant': {v.name}'s group_size {v.group_size} exceeds the {n_classes} classes "
            f"of tta_shapes (candidates are distinct classes); set a variant with group_size <= {n_classes}"
        )
    rep.warnings += _warnings(cfg, [c.name for c, _ in rewards], where)
    if cfg.method == "variant" and v.updates.epochs == 1 and clip != "none":
        rep.notes.append(
            f"{where}: key 'tta.variant': one update per rollout on fresh candidates: the ratio is 1 and "
            f"{v.name}'s clip does nothing (REINFORCE with a group baseline, as RLCF)"
        )


def _warnings(cfg: TTASpec, reward_names: list[str], where: str) -> list[str]:
    out: list[str] = []
    kept = max(1, math.ceil(cfg.keep * cfg.views))
    if "tta_dispersion" in reward_names and kept == 1:
        out.append(
            f"{where}: key 'tta.rewards': tta_dispersion is 0 for every class with one kept view "
            f"(views {cfg.views} x keep {cfg.keep}); raise views or keep"
        )
    for name in reward_names:
        if name not in _LABEL_FREE:
            out.append(
                f"{where}: key 'tta.rewards': {name!r} is not one of zoo's label-free rewards "
                f"({', '.join(_LABEL_FREE)}); a reward that reads `answer` is not test-time adaptation"
            )
    return out
