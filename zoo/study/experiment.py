"""Studies (`experiments/*.yaml`): arms = (variant or ablation) x sweep points x seeds. zoo.study.validate
checks the arms, zoo.study.runner runs, resumes and shards them.

A study file holds the RunConfig keys (model, task, rewards, budget, optim, eval, tracking, ...) as
defaults shared by every arm, plus:

    variants: [ppo, grpo, dapo]                      # registry names (or variant files)
    ablations: {dapo-no-clip-higher: {variant: dapo, set: {clip: ppo}}}
    seeds: [0, 1]                                    # default: [seed] (0)
    sweep: {clip.eps_high: [0.24, 0.28], optim.lr: [1e-5, 2e-5]}   # grid, applied to every arm
    name: my_study                                   # default: the file name
    output_dir: runs/my_study                        # default: runs/<name>
    resources: {cpus: 2, gpus: 1}                    # per arm under `zoo ablate --ray` (zoo.study.ray_runner)

A dotted key whose first part is a variant slot (`clip.eps_high`, `loss.entropy_bonus.coef`) goes into the
arm's `set` (variant overrides); `group_size` and `updates.*` go to `budget.*` (the budget wins over
the variant); any other key (`optim.lr`, `budget.steps`) goes into the run config. A study-level `set` applies to every arm;
an ablation's `set` and then the sweep point override it. In a `set`, a key under one of
`ABLATION_RUN_KEYS` (`rewards`, `task`, `optim.lr`, ...) goes into that arm's run config instead:
`ablations: {grpo-w: {variant: grpo, set: {rewards: [correctness, {name: length, weight: 0.1}]}}}`.

Arm label: `<variant or ablation>[-<sweepkey>=<v>...]-s<seed>`; each arm runs in
`<output_dir>/<label>/` with `name = label`, `study = name`, `arm = label without -s<seed>`.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pydantic import Field, PrivateAttr, ValidationError, field_validator

from zoo.config import variant as V
from zoo.config.overrides import OverrideError, apply_dotted, did_you_mean
from zoo.config.run import VARIANT_FORMS, RunConfig, VariantRef, parse_run_config, set_dotted
from zoo.config.schema import Strict, format_validation
from zoo.config.user_keys import shown
from zoo.config.variant import VariantError, read_yaml_file
from zoo.study.baseline_check import check_baseline
from zoo.study.study_checks import PER_ARM_KEYS, duplicate_sweep_arms, key_collisions

STUDY_KEYS = ("variants", "ablations", "seeds", "sweep", "baseline", "resources")
_SAFE = re.compile(r"[^A-Za-z0-9._=+,-]+")
_SEED_SUFFIX = re.compile(r"-s(-?\d+)$")


class Ablation(Strict):
    """One named ablation arm: a variant with dotted overrides (`{clip: ppo, clip.eps_high: 0.3}`)."""

    variant: VariantRef
    set: dict[str, Any] = Field(default_factory=dict)


class Resources(Strict):
    """What each arm asks a Ray cluster for under `zoo ablate --ray` (Ray's `num_cpus`, `num_gpus`)."""

    cpus: float | None = Field(
        None, gt=0, description="CPUs per arm; its torch threads too (default: --threads, else 1)"
    )
    gpus: float | None = Field(None, ge=0, description="GPUs per arm (default: 1 where the cluster has GPUs, else 0)")


class Study(RunConfig):
    """A validated study file: shared RunConfig defaults + the arms' definition."""

    name: str | None = None  # type: ignore[assignment]
    variants: list[VariantRef] = Field(default_factory=list)
    ablations: dict[str, Ablation] = Field(default_factory=dict)
    seeds: list[int] | None = None
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    baseline: str | None = Field(
        None,
        description="the arm the report compares the others against "
        "(paired by seed); default: the first variant (or ablation)",
    )
    resources: Resources = Field(default_factory=Resources)
    path: str | None = Field(None, exclude=True)
    _from_variant: bool = PrivateAttr(False)  # its one arm is the top-level `variant:` (no `variants`)

    @field_validator("variants", mode="before")
    @classmethod
    def _variants_are_a_list(cls, v: Any) -> Any:
        if not isinstance(v, list):
            fix = f": write `variants: [{v}]`" if isinstance(v, str) and v else ""
            raise ValueError(f"expected a list of variants, each {VARIANT_FORMS}; got {shown(v)}{fix}")
        return v

    def study_dir(self) -> Path:
        """Where the arms, study.json and report.md go (`output_dir`, default runs/<name>)."""
        return Path(self.output_dir or Path("runs") / str(self.name))


@dataclass
class Arm:
    """One run of a study. label: the folder name; base: the variant or ablation name;
    sweep: this arm's sweep point; config: its complete RunConfig."""

    label: str
    base: str
    seed: int
    sweep: dict[str, Any]
    config: RunConfig
    overrides: dict[str, Any] = field(default_factory=dict)
    origin: str = "set"  # where `overrides` were written, for error messages
    variant_at: str = ""  # where its variant was written, for error messages: `s.yaml: key 'variants[0]'`

    @property
    def group(self) -> str:
        """The label without the seed: arms that differ only by seed share it (the report averages them)."""
        return _SEED_SUFFIX.sub("", self.label)


def seed_of(label: str) -> str:
    """The seed of an arm label (`grpo-s1` -> "1"), "?" when it has no `-s<seed>` suffix."""
    m = _SEED_SUFFIX.search(label)
    return m.group(1) if m else "?"


# --------------------------------------------------------------------------- load


def read_study_file(path: Path) -> dict[str, Any]:
    """The top-level mapping of a study (or run) file. Raises VariantError naming the file when it is
    missing, not YAML or not a mapping."""
    if not path.exists():
        raise VariantError(f"{path}: file not found")
    data = read_yaml_file(path)
    if not isinstance(data, dict):
        raise VariantError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def parse_study(data: Mapping[str, Any], where: str, default_name: str = "study") -> Study:
    """Validate a study dict. Raises VariantError naming `where` and the key."""
    for k in ("study", "arm"):
        if k in data:
            raise VariantError(f"{where}: key {k!r} is set by `zoo ablate` for each arm; remove it")
    try:
        st = Study.model_validate(dict(data))
    except ValidationError as e:
        raise VariantError(format_validation(e, where, Study)) from None
    st.path = where
    if not st.name:
        st.name = default_name
    _check_structure(st, where, explicit_variant="variant" in data)
    return st


def _check_structure(st: Study, where: str, explicit_variant: bool) -> None:
    """Checks no field can make alone: arms exist, names unique and usable as folder names."""
    if not st.variants and not st.ablations:
        if not explicit_variant:
            raise VariantError(
                f"{where}: no arms: add `variants: [grpo, ...]` and/or `ablations: {{name: {{variant: ..., set: ...}}}}`"
            )
        st.variants = [st.variant]
        st._from_variant = True
    elif explicit_variant:
        raise VariantError(
            f"{where}: key 'variant': a study's arms come from `variants` and `ablations`; "
            f"`variant: {st.variant}` would be ignored (add it to `variants` instead)"
        )
    dup = sorted({v for v in st.variants if st.variants.count(v) > 1})
    if dup:
        raise VariantError(f"{where}: key 'variants': listed twice: {', '.join(dup)}")
    clash = sorted(set(st.ablations) & {_base_name(v) for v in st.variants})
    if clash:
        raise VariantError(f"{where}: key 'ablations': {', '.join(clash)} is also a variant arm; rename the ablation")
    for name in st.ablations:
        if not name or _SAFE.sub("_", name) != name or name in (".", ".."):
            raise VariantError(
                f"{where}: key 'ablations.{name}': not usable as a folder name (letters, digits and . _ - = + , only)"
            )
    if not st.name or _SAFE.sub("_", str(st.name)) != str(st.name) or str(st.name) in (".", ".."):
        raise VariantError(
            f"{where}: key 'name': {st.name!r} names the study folder runs/<name>: use letters, "
            "digits and . _ - = + , only (not '.' or '..')"
        )
    if st.seeds is None:
        st.seeds = [st.seed]
    if not st.seeds or len(set(st.seeds)) != len(st.seeds):
        raise VariantError(f"{where}: key 'seeds': need at least one seed and no repeats, got {st.seeds}")
    for key, values in st.sweep.items():
        if not values:
            raise VariantError(f"{where}: key 'sweep.{key}': needs at least one value")
        route_key(key, f"{where}: key 'sweep.{key}'")
    bases = [*(_base_name(v) for v in st.variants), *st.ablations]
    names = [b + "".join(f"-{k}={fmt_value(v)}" for k, v in p.items()) for b in bases for p in sweep_points(st)]
    check_baseline(st.baseline, names, where)  # with a sweep: the full arm name, as expand_arms labels it


def load_study(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Study:
    """Read and validate a study file (see the module doc), with dotted `--set` overrides applied to
    the shared run keys (`budget.steps=2`, `optim.lr=1e-4`, `set.clip.eps_high=0.3`, `variants=[grpo]`).
    Raises VariantError naming file and key."""
    p = Path(path)
    data = read_study_file(p)
    if overrides:
        data = _apply_study_overrides(data, overrides, str(p))
    return parse_study(data, str(p), default_name=p.stem)


def _apply_study_overrides(data: dict[str, Any], overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The study's own keys (`variants`, `ablations.x.set.clip=ppo`, `sweep.optim.lr=[..]`) here; every
    other key as a run-file override (`zoo.config.run.set_dotted`)."""
    study_keys = {k: v for k, v in overrides.items() if k.split(".")[0] in (*STUDY_KEYS, "name")}
    rest = {k: v for k, v in overrides.items() if k not in study_keys}
    out = set_dotted(data, rest, f"{where} (--set)")
    try:
        return apply_dotted(out, study_keys, f"{where} (--set)", _study_route)
    except OverrideError as e:
        raise VariantError(str(e)) from None


def _study_route(key: str) -> tuple[tuple[str, ...], list[str]]:
    """`sweep.` and `ablations.NAME.set.` hold dotted keys themselves: the rest of the key is one key there."""
    parts = key.split(".")
    if parts[0] == "sweep" and len(parts) > 1:
        return ("sweep",), [".".join(parts[1:])]
    if parts[0] == "ablations" and len(parts) > 3 and parts[2] == "set":
        return tuple(parts[:3]), [".".join(parts[3:])]
    return (), parts


# --------------------------------------------------------------------------- arms


BUDGET_ALIASES = ("group_size", "updates")
#: run-config keys an ablation's (or the study's) `set` may hold: they go into the arm's run config
ABLATION_RUN_KEYS = (
    "rewards",
    "gold",
    "task",
    "optim",
    "sampling",
    "eval",
    "budget",
    "guards",
    "ref_reset_every",
    "async",
)


def normalize_key(key: str) -> str:
    """`group_size` / `updates.minibatches` -> `budget.group_size` / `budget.updates.minibatches`:
    the budget wins over the variant in training, so that is where a sweep or override must go."""
    return f"budget.{key}" if key.split(".")[0] in BUDGET_ALIASES else key


def route_key(key: str, where: str) -> str:
    """ "set" when a dotted key addresses the variant (a slot or a variant field), "run" when it
    addresses the run config. Raises VariantError (with close matches) for anything else."""
    head = key.split(".")[0]
    if head in PER_ARM_KEYS:
        raise VariantError(f"{where}: {head!r} {PER_ARM_KEYS[head]}")
    if head in ("slots", "set", *BUDGET_ALIASES) or head in V.Slots.model_fields:
        return "set"
    if head in RunConfig.model_fields and head not in ("name", "study", "arm", "seed", "output_dir", "variant"):
        return "run"
    allowed = sorted(set(V.Slots.model_fields) | set(RunConfig.model_fields) | {"group_size", "updates"})
    hint = did_you_mean(head, allowed)
    raise VariantError(f"{where}: {head!r} is neither a variant slot/field nor a run-config key{hint}")


def fmt_value(v: Any) -> str:
    """A sweep or override value as it appears in an arm label (`1e-05`, `true`, `[1,2]`): folder-safe."""
    s = (
        json.dumps(v, separators=(",", ":"))
        if isinstance(v, (dict, list))
        else str(v).lower()
        if isinstance(v, bool)
        else str(v)
    )
    return _SAFE.sub("_", s).strip("_") or "_"


def _base_name(variant_name: str) -> str:
    """The arm name of a variant entry: a registry name, or a variant file's stem."""
    return Path(variant_name).stem if variant_name.endswith((".yaml", ".yml")) else variant_name


def _bases(st: Study) -> list[tuple[str, str, dict[str, Any]]]:
    """(arm base name, variant, set) for every variant and ablation, in file order."""
    shared = dict(st.set)
    out = [(_base_name(v), v, dict(shared)) for v in st.variants]
    out += [(name, ab.variant, {**shared, **ab.set}) for name, ab in st.ablations.items()]
    return out


def sweep_points(st: Study) -> list[dict[str, Any]]:
    """The grid over `sweep` (keys in file order); [{}] when there is no sweep."""
    keys = list(st.sweep)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(st.sweep[k] for k in keys))]


def expand_arms(st: Study) -> list[Arm]:
    """Every arm of the study: (variant or ablation) x sweep point x seed, labelled and configured.

    Raises VariantError when a label repeats or an arm's run config does not validate."""
    base_data = st.model_dump(exclude=set(STUDY_KEYS) | {"path"})
    where = st.path or str(st.name)
    arms: list[Arm] = []
    for base, variant_name, sets in _bases(st):
        _refuse_collisions(st, base, sets, where)
        key = f"ablations.{base}.variant" if base in st.ablations else "variant" if st._from_variant else None
        at = f"{where}: key {key or f'variants[{st.variants.index(variant_name)}]'!r}"
        for point in sweep_points(st):
            suffix = "".join(f"-{k}={fmt_value(v)}" for k, v in point.items())
            for seed in st.seeds or [0]:
                label = f"{base}{suffix}-s{seed}"
                arms.append(_make_arm(st, base_data, where, label, base, variant_name, sets, point, seed))
                arms[-1].variant_at = at
    labels = [a.label for a in arms]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise VariantError(f"{where}: arm labels repeat: {', '.join(dup)}")
    same = duplicate_sweep_arms(arms)
    if same:
        pairs = "; ".join(f"{a} = {b}" for a, b in same)
        raise VariantError(
            f"{where}: key 'sweep': points that give the same arm twice ({pairs}): values equal once "
            "read as numbers (1e-3 and 1.0e-3 are both 0.001); list each value once"
        )
    return arms


def _refuse_collisions(st: Study, base: str, sets: dict[str, Any], where: str) -> None:
    """VariantError naming the places when one arm's `set` and the sweep set a key twice (or one
    replaces the other whole): zoo.study.study_checks.key_collisions."""
    origin = f"ablations.{base}.set" if base in st.ablations else "set"
    places = [(origin, {normalize_key(k): v for k, v in sets.items()})]
    places += [(f"sweep.{k}", {normalize_key(k): vs}) for k, vs in st.sweep.items()]
    found = key_collisions(places)
    if found:
        raise VariantError(f"{where}: arm {base!r}: " + "; ".join(found))


def _make_arm(
    st: Study,
    base_data: dict[str, Any],
    where: str,
    label: str,
    base: str,
    variant_name: str,
    sets: dict[str, Any],
    point: dict[str, Any],
    seed: int,
) -> Arm:
    data = copy.deepcopy(base_data)
    norm = {normalize_key(k): v for k, v in point.items()}
    run_keys = {k: v for k, v in norm.items() if route_key(k, where) == "run"}
    var_keys = {k.removeprefix("set."): v for k, v in norm.items() if route_key(k, where) == "set"}
    set_run = {k: v for k, v in sets.items() if k.split(".")[0] in ABLATION_RUN_KEYS}
    arm_set = {**{k: v for k, v in sets.items() if k not in set_run}, **var_keys}
    data = set_dotted(data, {**merge_keys(data, set_run), **run_keys}, f"{where} (arm {label})")
    group = _SEED_SUFFIX.sub("", label)
    data.update(
        name=label,
        variant=variant_name,
        set=arm_set,
        seed=seed,
        study=st.name,
        arm=group,
        output_dir=str(st.study_dir() / label),
    )
    cfg = parse_run_config(data, f"{where} (arm {label})")
    origin = f"ablations.{base}.set" if base in st.ablations else "set (--set)"
    if var_keys:
        origin += " / sweep"
    return Arm(label=label, base=base, seed=seed, sweep=dict(point), config=cfg, overrides=arm_set, origin=origin)


def merge_keys(data: Mapping[str, Any], sets: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`sets` as dotted keys: a mapping whose place in `data` is also a mapping merges key by key,
    so `budget: {group_size: 8}` keeps the study's other budget keys (steps, max_new_tokens);
    anything else (a list, a scalar, a mapping over a string such as `sampling.backend`) replaces."""
    out: dict[str, Any] = {}
    for key, value in sets.items():
        node: Any = data
        for part in (prefix + key).split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(value, Mapping) and value and isinstance(node, Mapping):
            out.update(merge_keys(data, value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
