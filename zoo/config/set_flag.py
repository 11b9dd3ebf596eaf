"""Errors about a command line's `--set KEY=VALUE`, told as the flag's and not the file's.

`zoo run`, `zoo ablate` and `zoo validate` apply `--set` to the run or study file before the schema
reads it (`zoo.config.run.set_dotted`), so a bad value is reported at the file's key
(`run.yaml: key 'budget.steps': Input should be a valid integer`), as if the file were wrong.
`blame_set_flag` rewrites each line of such a message that is about a key a `--set` gave:

    --set budget.steps=abc: Input should be a valid integer, unable to parse string as an integer;
    budget.steps takes an integer >= 1 (--set overrides run.yaml)

`describe_key` says what a run-file key takes, from the schema; `close_keys` finds the run-file keys
close to a misspelt one, dotted paths included (`stesp` -> `budget.steps`).
"""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any, Mapping

from pydantic import BaseModel

from zoo.config.schema import union_members
from zoo.config.user_keys import plain_reason, show_value

#: the shapes of a message line that names a key: the schema's `where: key 'a.b': why` or `... is not
#: allowed`, an override's `where: override 'a.b': why`, `zoo.config.user_keys`' `where: set.a.b = v: why`,
#: and a task loader's `task: task key 'size' must ...`; an arm's `arm NAME: ` or `all N arms: ` may lead
_PRE = r"(?P<pre>(?:arm \S+(?: \([^)]*\))?: |all \d+ arms: )?)"
_LINE_KEY = re.compile(_PRE + r"(?P<where>.+?): (?:key|override) '(?P<key>[^']+)'(?P<rest>(?:: | is not allowed).*)$")
_LINE_USER = re.compile(_PRE + r"(?P<where>[^:]+\.ya?ml): (?P<key>[a-z_][\w.]*) = (?P<rest>.*)$")
_LINE_TASK = re.compile(_PRE + r"task: (?P<rest>(?:[\w ]+ )?task key '(?P<key>[^']+)'.*)$")
_WHERE_SUFFIX = re.compile(r" \((?:--set|overrides|arm [^)]*)\)$")


def _covers(set_key: str, key: str) -> bool:
    """Whether the value at `key` came from `--set set_key=...` (the same key, or one under it: `a.b`, `a[0]`)."""
    return key == set_key or key.startswith((set_key + ".", set_key + "["))


def blame_set_flag(msg: str, sets: Mapping[str, Any], model: type[BaseModel] | None = None, source: Any = None) -> str:
    """`msg` with each line about a key one of `sets` (the parsed `--set` overrides) gave rewritten to
    lead with `--set KEY=VALUE` and end with what the key takes in the schema `model` (e.g. RunConfig;
    `describe_key`; nothing without one) and the file the flag overrode (the line's own, else `source`); other
    lines unchanged (module doc)."""
    if not sets:
        return msg
    return "\n".join(_blame_line(line, sets, model, source) for line in str(msg).splitlines())


def _blame_line(line: str, sets: Mapping[str, Any], model: type[BaseModel] | None, source: Any) -> str:
    for pattern in (_LINE_KEY, _LINE_USER, _LINE_TASK):
        m = pattern.match(line)
        if m is None:
            continue
        key = f"task.{m['key']}" if pattern is _LINE_TASK else m["key"]
        hits = [k for k in sets if _covers(str(k), key)]
        if hits:
            return _rewrite(m, key, max(hits, key=len), sets, model, source)
    return line


def _rewrite(
    m: re.Match, key: str, set_key: str, sets: Mapping[str, Any], model: type[BaseModel] | None, source: Any
) -> str:
    """The line `m` matched, leading with `--set set_key=value` (see `blame_set_flag`)."""
    value = show_value(sets[set_key])
    rest = m["rest"]
    if m.re is _LINE_USER:
        rest = rest.removeprefix(f"{value}: ")
    rest = plain_reason(rest.removeprefix(": ").lstrip())
    if rest.startswith("is not allowed"):
        rest = f"key {key!r} {rest}"
    elif key != set_key and not rest.startswith(("key ", "task key ")):
        rest = f"key {key!r}: {rest}"  # a key inside the mapping the flag gave
    out = f"{m['pre']}--set {set_key}={value}: {rest}"
    takes = describe_key(key, model)
    if (
        takes and " allowed: " not in rest and not rest.startswith(("Input should be '", "must be a mapping of"))
    ):  # not a 2nd list
        out += f"; {key} takes {takes}"
    where = m.groupdict().get("where") or (str(source) if source is not None else None)
    if where:
        out += f" (--set overrides {_WHERE_SUFFIX.sub('', where)})"
    return out


# --------------------------------------------------------------------------- the schema's keys


def _model_of(ann: Any) -> type[BaseModel] | None:
    """The pydantic model among an annotation's alternatives (`Updates | None` -> Updates), else None."""
    for m in union_members(ann):
        if isinstance(m, type) and issubclass(m, BaseModel):
            return m
    return None


def _field(model: type[BaseModel], dotted: str) -> Any:
    """The pydantic FieldInfo at `dotted` under `model` (through nested models), else None."""
    field = None
    for part in dotted.split("."):
        if model is None or part not in model.model_fields:
            return None
        field = model.model_fields[part]
        model = _model_of(field.annotation)
    return field


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _describe(ann: Any, metadata: list[Any]) -> str:
    """An annotation (with its constraints) in words: `an integer >= 1`, `one of 'a', 'b'`, ..."""
    if typing.get_origin(ann) is typing.Annotated:
        inner, *extra = typing.get_args(ann)
        return _describe(inner, [*metadata, *(x for e in extra for x in getattr(e, "metadata", [e]))])
    alts = [a for a in union_members(ann) if a is not type(None)]
    if len(alts) > 1 or len(alts) < len(union_members(ann)):
        words = [_describe(a, metadata) for a in alts] + (["null"] if type(None) in union_members(ann) else [])
        return " or ".join(dict.fromkeys(words))
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(ann))
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return f"a mapping with {', '.join(ann.model_fields)}"
    if origin in (list, tuple) or ann in (list, tuple):
        return "a list"
    if origin is dict or ann is dict:
        return "a mapping"
    base = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(ann)
    if base is None:
        return ""
    bounds = [f"{sign} {getattr(c, attr)}" for c in metadata for attr, sign in _BOUNDS if hasattr(c, attr)]
    return base + (" " + " and ".join(bounds) if bounds and ann is not bool else "")


def describe_key(dotted: str, model: type[BaseModel] | None) -> str | None:
    """What the key `dotted` (e.g. `budget.steps`) takes in the schema `model` (e.g. RunConfig): `an
    integer >= 1`; None without a model, or for a key the schema does not type (under `task`, `set`)."""
    if model is None:
        return None
    field = _field(model, dotted)
    if field is None:
        return None
    return _describe(field.annotation, list(field.metadata)) or None


def dotted_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key of `model` as a dotted path, the nested models' keys included (`budget.steps`)."""
    out = []
    for name, f in model.model_fields.items():
        out.append(prefix + name)
        sub = _model_of(f.annotation)
        if sub is not None and sub is not model:
            out += dotted_keys(sub, f"{prefix}{name}.")
    return out


def close_keys(key: str, model: type[BaseModel], n: int = 3, cutoff: float = 0.75) -> list[str]:
    """Up to `n` dotted keys of `model` close to `key`: the whole key against each dotted path, and
    its first part against each path's last part (`stesp` -> `budget.steps`, `lr` -> `optim.lr`)."""
    paths = dotted_keys(model)
    close = difflib.get_close_matches(key, paths, n=n, cutoff=cutoff)
    by_last: dict[str, list[str]] = {}
    for p in paths:
        by_last.setdefault(p.rsplit(".", 1)[-1], []).append(p)
    for word in difflib.get_close_matches(key.split(".")[0], list(by_last), n=n, cutoff=cutoff):
        close += by_last[word]
    return list(dict.fromkeys(close))[:n]
