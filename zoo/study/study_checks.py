"""Study checks over the expanded arms: sweep points that make the same arm twice, arm folders that
belong to another study, and what to say for a sweep over a key that each arm sets itself (`seed`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from zoo.checks.run_checks import coerce_numeric

IDENTITY_KEYS = {"name", "output_dir", "arm"}  # differ between arms by construction
PER_ARM_KEYS = {  # run keys a study sets per arm: a sweep or override over them says what to use instead
    "seed": "is given per arm by `seeds`: write `seeds: [0, 1, 2]` instead of sweeping it",
    "variant": "is given per arm by `variants` and `ablations`: list the variants there",
    "name": "is the study's name (each arm is named by its label); it cannot be swept",
    "output_dir": "is the study's folder (each arm runs in <output_dir>/<label>); it cannot be swept",
    "study": "is set by `zoo ablate` for each arm",
    "arm": "is set by `zoo ablate` for each arm",
}


def comparable_config(cfg: Any) -> str:
    """A canonical text of an arm's RunConfig without its identity (name, folder), with numeric
    strings in the variant overrides read as numbers (`"1e-3"` == `0.001`)."""
    d = cfg.model_dump(mode="json", exclude=IDENTITY_KEYS)
    d["set"] = coerce_numeric(d.get("set") or {})
    return json.dumps(d, sort_keys=True, default=str)


def duplicate_sweep_arms(arms: Sequence[Any]) -> list[tuple[str, str]]:
    """(first label, repeated label) for arms of the same variant/ablation and seed whose sweep
    points give the same configuration (`optim.lr: [1e-3, 1.0e-3]`: PyYAML reads the first as a
    string, the schema makes both 0.001)."""
    seen: dict[tuple[str, int, str], str] = {}
    out = []
    for a in arms:
        key = (a.base, a.seed, comparable_config(a.config))
        if key in seen:
            out.append((seen[key], a.label))
        else:
            seen[key] = a.label
    return out


def foreign_arm_dir(study_dir: Path, arm_dir: Path, study_name: str | None) -> str | None:
    """Why `arm_dir` is not this study's own arm folder (a symlink to a folder outside `study_dir`,
    or a config.yaml written by a study other than `study_name`; None: not checked), else None."""
    from zoo.config.variant import VariantError, read_yaml_file

    arm_dir = Path(arm_dir)
    if not arm_dir.exists():
        return None
    real = arm_dir.resolve()
    if real.parent != Path(study_dir).resolve():
        return f"{arm_dir} links to {real}, outside this study's folder {study_dir}"
    cfg_file = arm_dir / "config.yaml"
    if study_name is not None and cfg_file.is_file():
        try:
            data = read_yaml_file(cfg_file)
        except VariantError:
            return None
        other = data.get("study") if isinstance(data, dict) else None
        if other not in (None, study_name):
            return f"{arm_dir} was written by study {other!r}, not {study_name!r}"
    return None
