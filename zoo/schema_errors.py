"""pydantic's ValidationError as one line per problem: `file: key 'a.b': message`.

pydantic's error locations carry union-branch tags (`tracking.wandb.WandbOpts.projct`,
`slots.kl.literal['none']`) and dict keys (`ablations.my_arm.sett`). `format_validation` walks the
model along each location, drops the tags, finds the model that owns an unknown key (through
unions, optionals, lists and dicts) so the message lists the allowed keys, and drops the errors of
union branches that do not fit the input's shape (a mapping given to `WandbOpts | bool` is not
reported as "not a valid boolean").
"""
from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from zoo.schema import union_members


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
    model_paths = {tuple(p[:-1]) if err["type"] == "extra_forbidden" else tuple(p)
                   for err, p, _, other in walked if not other}
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
        else:
            lines.append(f"{where}: key {key!r}: {err['msg'].removeprefix('Value error, ')}")
    return "\n".join(dict.fromkeys(lines))
