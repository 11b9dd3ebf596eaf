"""The base class of every config and variant model (run, study and variant files), with the rules
that hold across the whole schema:

- unknown keys are errors (`extra="forbid"`);
- every float is finite: `.nan` / `.inf` are rejected (`allow_inf_nan=False`);
- numeric strings are numbers where the schema expects a float (PyYAML 1.1 reads `1e-3` as the
  string "1e-3"; pydantic's lax mode turns it into 0.001);
- booleans and numbers do not stand in for each other: `steps: true` is not 1 and `enabled: 1` is not
  True (pydantic's lax mode would accept both); a field typed `X | bool` still takes a bool;
- every integer fits in 64 bits (`INT64`): torch's seeds and counters are C `long long`s, so
  `seed: 1180591620717411303424` would fail later as "Overflow when unpacking long long".

`Spec` is a component spec as files write it: a name, or a mapping with `name` and parameters.

Errors: pydantic's ValidationError as one line per problem: `file: key 'a.b': message`.

pydantic's error locations carry union-branch tags (`tracking.wandb.WandbOpts.projct`,
`slots.kl.literal['none']`) and dict keys (`ablations.my_arm.sett`). `format_validation` walks the
model along each location, drops the tags, finds the model that owns an unknown key (through
unions, optionals, lists and dicts) so the message lists the allowed keys, and drops the errors of
union branches that do not fit the input's shape (a mapping given to `WandbOpts | bool` is not
reported as "not a valid boolean").
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

Spec = Union[str, dict[str, Any]]
INT64 = (-(2**63), 2**63 - 1)  # the range of an integer field (torch.manual_seed and counters are int64)


def union_members(ann: Any) -> tuple[Any, ...]:
    """The alternatives of a Union / Optional annotation (the annotation itself otherwise)."""
    if typing.get_origin(ann) in (Union, types.UnionType):
        return typing.get_args(ann)
    return (ann,)


def _number_types(ann: Any) -> set[type]:
    """Which of bool, int, float the annotation accepts directly (not inside a container)."""
    out: set[type] = set()
    for m in union_members(ann):
        if typing.get_origin(m) is typing.Literal:
            out |= {type(x) for x in typing.get_args(m) if isinstance(x, (bool, int, float))}
        elif m in (bool, int, float):
            out.add(m)
        elif typing.get_origin(m) is typing.Annotated:
            out |= _number_types(typing.get_args(m)[0])
    return out


def bool_number_mixup(value: Any, ann: Any) -> str | None:
    """Why `value` must not be read as `ann` (a bool for a number, a number for a bool, an integer
    outside `INT64` for an integer field), else None.
    Looks into tuples and lists of numbers (`betas: [true, 0.9]`)."""
    accepted = _number_types(ann)
    if isinstance(value, int) and not isinstance(value, bool) and int in accepted and not INT64[0] <= value <= INT64[1]:
        return (
            f"{value} does not fit in a 64-bit integer (torch's seeds and counters): "
            "use a value between -2**63 and 2**63 - 1"
        )
    if isinstance(value, bool):
        if accepted & {int, float} and bool not in accepted:
            return f"expected a number, got the boolean {str(value).lower()}"
        return None
    if isinstance(value, (int, float)) and bool in accepted and not accepted & {int, float}:
        return f"expected true or false, got the number {value}"
    if isinstance(value, (list, tuple)):
        for m in union_members(ann):
            args = [a for a in typing.get_args(m) if a is not Ellipsis]
            if typing.get_origin(m) in (tuple, list) and args:
                for i, x in enumerate(value):
                    why = bool_number_mixup(x, args[min(i, len(args) - 1)])
                    if why:
                        return f"item {i}: {why}"
    return None


class Strict(BaseModel):
    """Base class of the config and variant models: the schema-wide rules of the module doc.

    Raises (through pydantic's ValidationError) for an unknown key, a non-finite float, or a bool
    given for a number (or the reverse)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_number_mixup(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None:
            why = bool_number_mixup(v, field.annotation)
            if why:
                raise ValueError(why)
        return v


MIN_TEMPERATURE = 0.01  # logits / T for T below this overflows float32 or makes every sample the argmax


def sampling_temperature(v: float) -> float:
    """A sampling temperature (`sampling.temperature`, `eval.temperature`): at least MIN_TEMPERATURE.
    Logits are divided by T; `1e-300` turns them into inf and NaN at the first step, which then reads as
    diverged updates. Raises ValueError giving the allowed range."""
    if not v >= MIN_TEMPERATURE:
        raise ValueError(
            f"{v!r} is too small: a sampling temperature must be >= {MIN_TEMPERATURE} (the logits are "
            f"divided by it: below that they overflow float32 to inf/NaN, or every sample is the "
            f"argmax); use {MIN_TEMPERATURE} or more (1.0 samples the policy as it is)"
        )
    return v


def finite_number(value: Any, what: str) -> float:
    """`value` as a finite float (numeric strings such as "1e-3" accepted).

    Raises ValueError naming `what` for a bool, a non-number, NaN or infinity."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what}: expected a number, got {value!r}")
    try:
        out = float(value)
    except ValueError:
        raise ValueError(f"{what}: expected a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{what}: must be finite, got {value!r}")
    return out


def _alternatives(ann: Any) -> list[Any]:
    """Union members of `ann` without None, with Annotated unwrapped."""
    out = []
    for m in union_members(ann):
        if typing.get_origin(m) is typing.Annotated:
            m = typing.get_args(m)[0]
        if m is not type(None):
            out.append(m)
    return out


def _is_model(m: Any) -> bool:
    return isinstance(m, type) and issubclass(m, BaseModel)


def _tag_of(m: Any) -> str:
    """How pydantic names a union branch in an error location (`WandbOpts`, `bool`, `literal['none']`)."""
    if typing.get_origin(m) is typing.Literal:
        return "literal[" + ",".join(repr(a) for a in typing.get_args(m)) + "]"
    if isinstance(m, type):
        return m.__name__
    return str(m).replace("typing.", "").replace(" ", "").lower()


def walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[list[str], type[BaseModel] | None, bool]:
    """Follow an error location of `model`: (the key path as the user wrote it, the model that owns
    the last key, whether the error came from a union branch that is not a model)."""
    path: list[str] = []
    owner: type[BaseModel] | None = None
    ann: Any = model
    other_branch = False
    for x in loc:
        if str(x).startswith("function-"):  # a validator's wrapper, not a key
            continue
        alts = _alternatives(ann)
        if len(alts) > 1:
            tags = {_tag_of(m): m for m in alts}
            if str(x) in tags:  # pydantic's name of the union branch: not a key
                ann = tags[str(x)]
                other_branch = not _is_model(ann)
                continue
            models = [m for m in alts if _is_model(m)]
            ann = models[0] if models else Any
        elif alts:
            ann = alts[0]
        path.append(str(x))
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if _is_model(ann):
            owner = ann
            f = ann.model_fields.get(str(x))
            if f is None:
                return path, owner, other_branch
            ann = f.annotation
        elif origin is dict and len(args) == 2:
            ann = args[1]
        elif origin in (list, set) and args:
            ann = args[0]
        elif origin is tuple and args:
            ann = args[min(int(x), len(args) - 1)] if str(x).isdigit() else args[0]
        else:
            ann = Any
    return path, owner, other_branch


def format_validation(e: ValidationError, where: str, model: type[BaseModel]) -> str:
    """`e` (raised by `model.model_validate`) as one line per problem, `where: key 'a.b': message`;
    an unknown key lists the allowed keys of the model it was written under, with a close match."""
    walked = [(err, *walk(model, tuple(err["loc"]))) for err in e.errors()]
    # key paths where a model branch of a union reported something: the input had the model's shape
    model_paths = {
        tuple(p[:-1]) if err["type"] == "extra_forbidden" else tuple(p) for err, p, _, other in walked if not other
    }
    lines = []
    for err, path, owner, other in walked:
        key = ".".join(path)
        if other and isinstance(err.get("input"), dict) and any(mp[: len(path)] == tuple(path) for mp in model_paths):
            continue  # `wandb: {projct: x}` is a misspelt mapping, not "not a valid boolean"; kl: {beta: .inf} not "'none'"
        if err["type"] == "extra_forbidden" and owner is not None:
            allowed = [k for k in owner.model_fields if k != "path"]
            close = difflib.get_close_matches(path[-1], allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lines.append(f"{where}: key {key!r} is not allowed{hint}; allowed: {', '.join(allowed)}")
        elif err["type"] == "model_type":  # not "a valid dictionary or instance of Async": the keys it takes
            lines.append(f"{where}: key {key!r}: {mapping_expected(owner, path, err.get('input'))}")
        else:
            lines.append(f"{where}: key {key!r}: {err['msg'].removeprefix('Value error, ')}")
    return "\n".join(dict.fromkeys(lines))


def mapping_expected(owner: type[BaseModel] | None, path: list[str], got: Any) -> str:
    """What a key that takes a section (a pydantic model) takes, in the file's terms, for a value that is
    not a mapping: `must be a mapping of max_staleness (required), workers, backend, or null; got false`
    (pydantic's own message names the Python class, `instance of Async`, which no file has)."""
    field = owner.model_fields.get(path[-1]) if owner is not None and path else None
    members = union_members(field.annotation) if field is not None else ()
    section = next((m for m in members if _is_model(m)), None)
    shown = "null" if got is None else str(got).lower() if isinstance(got, bool) else repr(got)
    if section is None:
        return f"must be a mapping, got {shown}"
    keys = ", ".join(k + (" (required)" if f.is_required() else "") for k, f in section.model_fields.items())
    null = ", or null" if type(None) in members else ""
    return f"must be a mapping of {keys}{null}; got {shown}"
