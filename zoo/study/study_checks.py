"""Study checks over the expanded arms: sweep points that make the same arm twice, arm folders that
belong to another study, and what to say for a sweep over a key that each arm sets itself (`seed`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from zoo.checks.settings import coerce_numeric

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


#: variant fields that name or describe it: two variants that differ only there train the same
VARIANT_LABELS = {"name", "summary", "paper", "base", "sources"}


def resolved_config(cfg: Any) -> str:
    """`comparable_config` with the variant and its `set` replaced by the effective variant they
    resolve to (zoo.config.run.effective_variant, without its names), so `clip.eps: 0.1` then
    `clip: ppo` equals `clip: ppo` alone and `clip: ppo` equals `clip: {name: ppo, eps: 0.2}` (defaults filled);
    `comparable_config` where the variant does not build."""
    from zoo.config.run import effective_variant
    from zoo.config.variant import VariantError

    try:
        ev = effective_variant(cfg)
        v = {**ev.model_dump(mode="json", exclude=VARIANT_LABELS | {"slots"}), "slots": ev.resolved()}
    except (VariantError, ValueError):
        return comparable_config(cfg)
    d = cfg.model_dump(mode="json", exclude=IDENTITY_KEYS | {"set", "variant"})
    return json.dumps({**d, "resolved_variant": v}, sort_keys=True, default=str)


def duplicate_sweep_arms(arms: Sequence[Any], across: bool = False) -> list[tuple[str, str]]:
    """(first label, repeated label) for arms of the same variant/ablation (any, with `across`) and
    seed whose configurations resolve to the same run (`optim.lr: [1e-3, 1.0e-3]`: PyYAML reads the
    first as a string, the schema makes both 0.001; `clip: ppo` after `clip.eps` replaces the spec)."""
    seen: dict[tuple[str, int, str], str] = {}
    out = []
    for a in arms:
        key = ("" if across else a.base, a.seed, resolved_config(a.config))
        if key in seen:
            out.append((seen[key], a.label))
        else:
            seen[key] = a.label
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: leaf value} of nested mappings."""
    if not isinstance(d, dict):
        return {prefix: d} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def arms_alike(a: Any, b: Any) -> str:
    """Why two arms that resolve to the same configuration (`duplicate_sweep_arms`) do: the keys their
    written configurations differ in (`variant`, `set.clip.eps`, ...), each with both values, or that
    they are written alike."""
    fa = _flat(json.loads(comparable_config(a.config)))
    fb = _flat(json.loads(comparable_config(b.config)))
    diff = [k for k in sorted(fa.keys() | fb.keys()) if k not in fa or k not in fb or fa[k] != fb[k]]
    if not diff:
        return "their configurations are written alike"

    def val(f: dict[str, Any], k: str) -> str:
        return repr(f[k]) if k in f else "unset"

    said = "; ".join(f"{k} = {val(fa, k)} in {a.group}, {val(fb, k)} in {b.group}" for k in diff)
    return f"they differ only in {said}, which resolve to the same variant and run settings"


def foreign_arm_dir(study_dir: Path, arm_dir: Path, study_name: str | None) -> str | None:
    """Why `arm_dir` is not this study's own arm folder (a dangling symlink, a symlink to a folder outside `study_dir`,
    or a config.yaml written by a study other than `study_name`; None: not checked), else None."""
    from zoo.config.variant import VariantError, read_yaml_file

    arm_dir = Path(arm_dir)
    if arm_dir.is_symlink() and not arm_dir.exists():
        return f"{arm_dir} is a symlink to {os.readlink(arm_dir)}, which does not exist (a dangling link)"
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


def _covers(a: str, b: str) -> bool:
    """Whether setting key `a` sets (or replaces) what key `b` sets: equal, or `a` a parent of `b`."""
    return a == b or b.startswith(a + ".")


def key_collisions(places: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """For one arm's overrides, `places` in the order they are applied ((where, {key: value}), e.g.
    ("ablations.x.set", ...), ("sweep", point)): one line per key that a later place sets again or
    replaces whole (`optim.lr` twice; `clip.eps` then `clip`), naming both places and which wins."""
    flat = [(where, k, v) for where, d in places for k, v in d.items()]
    out = []
    for i, (w1, k1, v1) in enumerate(flat):
        for w2, k2, v2 in flat[i + 1 :]:
            if _covers(k2, k1):
                what = "sets it again" if k1 == k2 else "replaces it whole"
                out.append(
                    f"key {k1!r} is set by {w1} ({v1!r}) and {w2} {what} ({k2} = {v2!r}): {w2} wins and the "
                    f"value of {w1} is dropped; set it in one place"
                )
    return out


def shared_set_overrides(study: Any) -> list[str]:
    """Warnings for keys a study's shared `set:` and an ablation's `set:` both give (or the ablation
    replaces whole): the ablation wins for its arms, the shared value is dropped there."""
    out = []
    for name, ab in study.ablations.items():
        for line in key_collisions([("set", dict(study.set)), (f"ablations.{name}.set", dict(ab.set))]):
            out.append(f"arm {name}: {line.replace('; set it in one place', '')}")
    return out


def unknown_variant(arm: Any) -> tuple[str, str] | None:
    """(what zoo.checks says, what to say) when a study arm's variant names no registry variant (or no
    file): `variant 'grpoo' not found; did you mean 'grpo', ...? known: ...` led by where it was written
    (`Arm.variant_at`: `s.yaml: key 'variants[0]'`); None when it is found, or for an arm that does not say
    where (a run file's: zoo.config.run.effective_variant names the run file's key 'variant')."""
    from zoo.config.variant import UnknownVariant, locate_variant

    if not arm.variant_at:
        return None
    try:
        locate_variant(arm.config.variant)
    except UnknownVariant as e:
        return str(e), f"{arm.variant_at}: {e}"
    return None


def unknown_set_keys(arm: Any, run_keys: Sequence[str]) -> list[tuple[str, str]]:
    """(what zoo.checks says, what to say) per key of a study arm's variant overrides (`Arm.overrides`:
    its `set` and sweep keys that do not go to the run config) that is no variant slot or field: where it
    was written (`Arm.origin`), the close key and what a `set` may hold, the variant's slots and fields
    and `run_keys` (zoo.study.experiment.ABLATION_RUN_KEYS, which go into the arm's run config)."""
    from zoo.config.overrides import did_you_mean
    from zoo.config.variant import NOT_A_VARIANT_KEY, Slots, Variant

    variant_keys = sorted((set(Slots.model_fields) | set(Variant.model_fields)) - {"path"})
    out = []
    for key in arm.overrides:
        head = str(key).removeprefix("slots.").split(".")[0]
        if head in variant_keys or head == "entropy_coef":  # entropy_coef: the variant's own message
            continue
        said = f"key {key!r} {NOT_A_VARIANT_KEY}"
        line = (
            f"{arm.origin}: key {key!r} is neither a variant slot/field nor a run-config key a `set` may hold"
            f"{did_you_mean(head, [*variant_keys, *run_keys])}; variant slots and fields: "
            f"{', '.join(variant_keys)}; run-config keys: {', '.join(run_keys)}"
        )
        out.append((said, line))
    return out


def study_term_errors(arm: Any, run_keys: Sequence[str]) -> list[tuple[str, str]]:
    """(what zoo.checks says, what to say) for a study arm's variant errors in the study's terms: an unknown
    variant (`unknown_variant`), then the `set` keys of neither kind (`unknown_set_keys`). `zoo validate`
    (zoo.study.validate.in_study_terms) and `zoo run` on a one-arm study (zoo.study.run_file) say these alike."""
    found = unknown_variant(arm)
    return ([found] if found else []) + unknown_set_keys(arm, run_keys)
