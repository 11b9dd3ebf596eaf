"""Named variants: load and parse the YAML files in `registry/` (and user directories; finding and reading them is
`zoo/config/variant_files.py`); their checks and diffs are in `zoo/config/diff.py`.

A variant fills every slot of the data flow (the slot table, `zoo/core/kinds.py`) with a component
spec and sets `group_size` and `updates: {epochs, minibatches}`. There are
no hidden defaults: each slot, `group_size` and `updates` is stated in the file or inherited
through `base: grpo` (the base's keys are taken, then the file's keys replace them, slot by slot).
User directories are listed in `ZOO_REGISTRY_PATH` (os.pathsep-separated).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Union

from pydantic import Field, ValidationError, create_model, field_validator, model_validator

from zoo.config import overrides
from zoo.config.desugar import hand_written
from zoo.config.distill import DistillSpec
from zoo.config.schema import Spec, Strict, format_validation
from zoo.config.variant_files import (
    UnknownVariant,
    VariantError,
    available_variants,
    builtin_dir,
    locate_variant,
    read_yaml_file,
    read_yaml_mapping,
    search_dirs,
    variant_files,
)
from zoo.core import kinds, registry

# finding and reading the files lives in zoo.config.variant_files; these names stay importable from here
__all__ = [
    "LIST_SLOTS",
    "NOT_A_VARIANT_KEY",
    "REQUIRED_TOP",
    "SLOT_KINDS",
    "AdaptiveKLSpec",
    "KLSpec",
    "Slots",
    "Spec",
    "UnknownVariant",
    "Updates",
    "Variant",
    "VariantError",
    "apply_overrides",
    "available_variants",
    "build_components",
    "builtin_dir",
    "load_variant",
    "locate_variant",
    "merge_variant",
    "missing_keys",
    "parse_variant",
    "read_yaml_file",
    "read_yaml_mapping",
    "repeated_items",
    "search_dirs",
    "variant_files",
]

SLOT_KINDS = kinds.slot_kinds()  # slot -> registry kind, for the slots filled by components
LIST_SLOTS = kinds.list_slots()


class AdaptiveKLSpec(Strict):
    """Ziegler et al. (arXiv:1909.08593 §2.2) adaptive KL controller."""

    target: float = Field(gt=0, description="target KL per sequence (nats)")
    horizon: int = Field(10_000, gt=0, description="horizon in episodes (completions)")


class KLSpec(Strict):
    """Where the KL to the reference goes, with which estimator and coefficient beta."""

    placement: Literal["reward", "loss", "none"]  # required: `kl: {adaptive: ...}` alone is an error, not "none"
    estimator: str = "k3"
    beta: float = Field(0.0, ge=0)
    adaptive: AdaptiveKLSpec | None = None
    bias_correction: bool = False  # TRL use_bias_correction_kl: k x pi_theta / pi_old (placement loss only)

    @model_validator(mode="after")
    def _bias_correction_in_the_loss(self) -> "KLSpec":
        if self.bias_correction and self.placement != "loss":
            raise ValueError(
                "kl.bias_correction multiplies the KL in the loss by pi_theta / pi_old (TRL use_bias_correction_kl): "
                f"it needs placement: loss, got {self.placement!r}"
            )
        return self

    @field_validator("estimator")
    @classmethod
    def _known_estimator(cls, v: str) -> str:
        registry.get("kl_estimator", v)  # raises with close matches
        return v


class Updates(Strict):
    """How a rollout batch is reused: `epochs` passes, each split into `minibatches` optimizer steps."""

    epochs: int = Field(1, ge=1)
    minibatches: int = Field(1, ge=1)


class _SlotsBase(Strict):
    def kl_spec(self) -> KLSpec:
        """The `kl` slot as a KLSpec (`kl: none` -> placement "none")."""
        return KLSpec(placement="none") if self.kl == "none" else self.kl  # type: ignore[attr-defined,return-value]


SETTING_TYPES: dict[str, Any] = {"kl": Union[Literal["none"], KLSpec]}  # the slots that hold a setting
assert set(SETTING_TYPES) == set(kinds.setting_slots()), "zoo/core/kinds.py and SETTING_TYPES disagree"


def _slot_type(row: kinds.Kind) -> Any:
    if not row.registered:
        return SETTING_TYPES[row.kind]
    if row.many:
        return list[Spec]
    return Optional[Spec] if row.optional else Spec


# Every slot of the table, all required (no hidden defaults): stated in the file or through `base:`.
Slots = create_model(  # type: ignore[call-overload]
    "Slots",
    __base__=_SlotsBase,
    __doc__="A variant's slots, one field per slot of zoo/core/kinds.py (all required).",
    **{row.slot: (_slot_type(row), ...) for row in kinds.TABLE if row.slot is not None},
)


class Variant(Strict):
    """One named combination of components (a file in registry/)."""

    name: str
    summary: str = ""
    paper: str = ""
    base: str | None = None
    group_size: int = Field(ge=1)
    updates: Updates
    critic_warmup: int = Field(
        0,
        ge=0,
        description="rollout steps at the start in which only the critic trains "
        "(value pretraining, VAPO arXiv 2504.05118 §4.1; verl trainer.critic_warmup)",
    )
    plugins: list[str] = Field(default_factory=list, description="modules to import for user components")
    trains: Literal["language_model", "dual_encoder"] = Field(
        "language_model",
        description="the policy the update is written for: `dual_encoder` variants (grpo_tta, rlcf) run "
        "with `zoo tta` only, and `zoo run` refuses them before any model loads",
    )
    slots: Slots  # type: ignore[valid-type]
    distill: DistillSpec | None = Field(None, description="a teacher's per-token signal (zoo/config/distill.py)")
    sources: dict[str, str] = Field(default_factory=dict)
    path: str | None = Field(None, exclude=True)

    def resolved(self, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every slot as a full spec with defaults filled in (what `zoo show` prints)."""
        comps = build_components(self, context)
        out: dict[str, Any] = {}
        for slot, comp in comps.items():
            if isinstance(comp, list):
                out[slot] = [c.spec() for c in comp]
            else:
                out[slot] = comp.spec() if comp is not None else None
        out["kl"] = self.slots.kl_spec().model_dump()
        if self.distill is not None:  # a teacher's signal (zoo/config/distill.py)
            d = self.distill.model_dump()
            out["distill"] = {**d, "teacher": registry.build("teacher", d["teacher"]).spec()}
        return out


def _raw(name_or_path: str | Path, _seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], Path]:
    """The raw dict of a variant with its `base` chain merged in."""
    path = locate_variant(name_or_path)
    data = read_yaml_mapping(path)
    me = str(path.resolve())
    if me in _seen:
        chain = " -> ".join(Path(x).stem for x in _seen + (me,))
        raise VariantError(f"{path}: key 'base': cycle {chain}")
    base = data.get("base")
    if base:
        base_data, _ = _raw(_base_path(base, path), _seen + (me,))
        data = merge_variant(base_data, data)
    return data, path


def _base_path(base: str, child: Path) -> str | Path:
    """`base:` names a variant, or a YAML file (relative to the child's folder)."""
    if str(base).endswith((".yaml", ".yml")):
        p = Path(base)
        return p if p.is_absolute() or p.exists() else child.parent / p
    return base


def merge_variant(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """`child` over `base`: top-level keys replace, `slots` and `sources` merge key by key."""
    out = copy.deepcopy(base)
    own_sources = dict(child.get("sources") or {})
    replaced = [k for k in (child.get("slots") or {})] + [k for k in child if k not in ("slots", "sources")]
    for k in replaced:  # a base's source no longer describes a value the child replaced
        if k not in own_sources and (out.get("sources") or {}).get(k) is not None:
            if (base.get("slots") or {}).get(k, base.get(k)) != (child.get("slots") or {}).get(k, child.get(k)):
                out["sources"].pop(k)
    for k, v in child.items():
        if k in ("slots", "sources") and isinstance(v, dict):
            out[k] = {**out.get(k, {}), **copy.deepcopy(v)}
        else:
            out[k] = copy.deepcopy(v)
    for k in ("summary", "paper"):  # never inherit another paper's identity silently
        if k not in child:
            out.pop(k, None)
    return out


def parse_variant(data: dict[str, Any], where: str) -> Variant:
    """Validate a raw dict (its `base` chain already merged); errors name `where` (a file) and the
    offending key. Modules listed under `plugins:` are imported first, so their components resolve.
    Raises VariantError, also for a slot, `group_size` or `updates` that is neither stated nor inherited."""
    plugins = data.get("plugins") or []
    if plugins:
        try:
            registry.load_plugins(list(plugins))
        except registry.ComponentError as e:
            raise VariantError(f"{where}: key 'plugins': {e}") from None
    if "entropy_coef" in data:
        raise VariantError(
            f"{where}: key 'entropy_coef' was replaced by a loss term: write "
            f"`slots: {{loss: [{{name: entropy_bonus, coef: {data['entropy_coef']}}}]}}`"
        )
    missing_keys(data, where)
    try:
        v = Variant.model_validate(data)
    except ValidationError as e:
        raise VariantError(format_validation(e, where, Variant)) from None
    except registry.ComponentError as e:
        raise VariantError(f"{where}: {e}") from None
    v.path = where
    reserved = hand_written(v.slots) + repeated_items(v.slots)
    if reserved:
        raise VariantError("\n".join(f"{where}: {e}" for e in reserved))
    return v


def repeated_items(slots: Any) -> list[str]:
    """An error per list slot that names the same component twice. Same parameters (`correction: [tis,
    tis]`) would apply it twice; different ones (two `overlong_soft` at two cache fractions) would log
    both under one metric key (`reward/overlong_soft`, `loss/<name>`), so the metrics could not be
    read. Combining two of a kind takes a second registered name (a plugin)."""
    out = []
    for slot in LIST_SLOTS:
        names = [spec if isinstance(spec, str) else spec.get("name") for spec in getattr(slots, slot, None) or []]
        for name in dict.fromkeys(n for n in names if names.count(n) > 1):
            out.append(
                f"key 'slots.{slot}': {name!r} is listed {names.count(name)} times; each item applies once "
                f"and logs under its name, so a repeat would apply it again or mix two items' metrics: list it "
                "once (to combine two of a kind, register a second name in a plugin; docs/guides/extending.md)"
            )
    return out


REQUIRED_TOP = ("group_size", "updates")  # top-level keys with no default


def missing_keys(data: Mapping[str, Any], where: str) -> None:
    """Raise VariantError naming `where` and every slot (`slots.clip`) or required top-level key
    that `data` (a variant with its base chain merged) does not state: there are no hidden defaults."""
    slots = data.get("slots")
    stated = set(slots) if isinstance(slots, Mapping) else set()
    missing = [k for k in REQUIRED_TOP if k not in data] + [f"slots.{s}" for s in kinds.slots() if s not in stated]
    if missing and (slots is None or isinstance(slots, Mapping)):
        keys = ", ".join(repr(k) for k in missing)
        raise VariantError(
            f"{where}: missing {'key' if len(missing) == 1 else 'keys'} {keys}: a variant states every "
            "slot, group_size and updates, or inherits them with `base:` (e.g. base: grpo)"
        )


def load_variant(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None) -> Variant:
    """A variant by registry name or file path, with optional dotted overrides (`apply_overrides`).

    Raises VariantError naming the file and key for any schema error or unknown component."""
    data, path = _raw(name_or_path)
    where = str(path)
    if overrides:
        data = apply_overrides(data, overrides, where=f"{where} (overrides)")
    return parse_variant(data, where)


# --------------------------------------------------------------------------- overrides

_TOP_KEYS = set(Variant.model_fields) - {"path"}
NOT_A_VARIANT_KEY = "is neither a slot nor a variant field"  # an override key `apply_overrides` refuses


def apply_overrides(data: dict[str, Any], sets: Mapping[str, Any], where: str = "overrides") -> dict[str, Any]:
    """Apply dotted overrides to a raw variant dict (`zoo.config.overrides` does the setting).

    Keys address slots directly (`clip: ppo`, `clip.eps_high: 0.32`, `kl.beta: 0.0`) or top-level
    fields (`group_size: 8`, `updates.minibatches: 2`); `slots.` may be written explicitly. Setting a
    parameter of a slot given by name alone turns it into `{name: ..., param: value}`.
    Raises VariantError for a key that is neither a slot nor a variant field, or a parameter of a
    list slot.
    """

    def route(key: str) -> tuple[tuple[str, ...], list[str]]:
        parts = key.split(".")
        if parts[0] == "slots" and len(parts) > 1:
            parts = parts[1:]
        if parts[0] in Slots.model_fields:
            return ("slots",), parts
        if parts[0] in _TOP_KEYS:
            return (), parts
        if parts[0] == "entropy_coef":
            raise VariantError(
                f"{where}: key {key!r}: entropy_coef was replaced by the loss term entropy_bonus: "
                "set loss.entropy_bonus.coef"
            )
        allowed = sorted(set(Slots.model_fields) | _TOP_KEYS)
        raise VariantError(
            f"{where}: key {key!r} {NOT_A_VARIANT_KEY}"
            f"{overrides.did_you_mean(parts[0], allowed)}; allowed: {', '.join(allowed)}"
        )

    for key, value in sets.items():
        _check_whole_slot(str(key), value, where)
    try:
        return overrides.apply_dotted(data, sets, where, route, spec_of=_spec_of, list_name="list slot", by_name=True)
    except overrides.OverrideError as e:
        raise VariantError(str(e)) from None


def _check_whole_slot(key: str, value: Any, where: str) -> None:
    """A mapping set as a whole component slot (`clip: {eps: 0.3}`) replaces the variant's component,
    so it must name one. Raises VariantError pointing to the dotted key that changes one parameter
    (`clip.eps: 0.3`) when it does not."""
    slot = key.removeprefix("slots.")
    if slot not in SLOT_KINDS or slot in LIST_SLOTS or not isinstance(value, Mapping) or "name" in value:
        return
    dotted = ", ".join(f"{slot}.{k}: {v}" for k, v in value.items()) or f"{slot}.<param>: <value>"
    params = "".join(f", {k}: {v}" for k, v in value.items())
    raise VariantError(
        f"{where}: key {key!r}: a mapping replaces the variant's whole {slot} and needs a 'name' "
        f"({{name: <{slot}>{params}}}); to change a parameter of the variant's {slot}, set a dotted key: {dotted}"
    )


def _spec_of(slot: str, name: str) -> dict[str, Any]:
    """A slot given by name alone, as a mapping: `ppo` -> {name: ppo}; `kl: none` -> {placement: none}."""
    return {"placement": "none"} if slot == "kl" and name == "none" else {"name": name}


# --------------------------------------------------------------------------- components


def build_components(v: Variant, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Build every slot's component: slot -> Component, list of Components, or None (critic).

    Raises VariantError (naming the variant file and slot) on unknown names or bad parameters."""
    out: dict[str, Any] = {}
    where = v.path or v.name
    for slot, kind in SLOT_KINDS.items():
        spec = getattr(v.slots, slot)
        try:
            if slot in LIST_SLOTS:
                out[slot] = [registry.build(kind, s, context) for s in spec]
            elif spec is None:
                out[slot] = None
            else:
                out[slot] = registry.build(kind, spec, context)
        except registry.ComponentError as e:
            raise VariantError(f"{where}: key 'slots.{slot}': {e}") from None
    return out
