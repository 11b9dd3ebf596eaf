"""The base class of every config and variant model (run, study and variant files), with the rules
that hold across the whole schema:

- unknown keys are errors (`extra="forbid"`);
- every float is finite: `.nan` / `.inf` are rejected (`allow_inf_nan=False`);
- numeric strings are numbers where the schema expects a float (PyYAML 1.1 reads `1e-3` as the
  string "1e-3"; pydantic's lax mode turns it into 0.001);
- booleans and numbers do not stand in for each other: `steps: true` is not 1 and `enabled: 1` is not
  True (pydantic's lax mode would accept both); a field typed `X | bool` still takes a bool.

`Spec` is a component spec as files write it: a name, or a mapping with `name` and parameters.
"""
from __future__ import annotations

import types
import typing
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

Spec = Union[str, dict[str, Any]]


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
    """Why `value` must not be read as `ann` (a bool for a number, a number for a bool), else None.
    Looks into tuples and lists of numbers (`betas: [true, 0.9]`)."""
    accepted = _number_types(ann)
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
