"""The component registry: every slot's components are registered here by kind and name.

    @register("clip", "my_clip", check=my_check)
    def my_clip(logp, logp_old, adv, mask, *, eps: float = 0.2) -> ClipResult: ...

    build("clip", "ppo")                              # defaults
    build("clip", {"name": "clip_higher", "eps_high": 0.28})
    available("clip")                                 # ['clip_higher', 'cispo', ...]

A component is a plain function. Its positional parameters are the data contract of its kind
(the same for every component of that kind, see `zoo.components`); its keyword-only parameters
are its hyperparameters, the only keys a YAML spec may set. `build` binds a spec against that
signature without running anything, so a typo is caught before any model is loaded.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
import traceback
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping

from zoo.core import kinds
from zoo.core.declarations import Declaration, declare

KINDS = kinds.registry_kinds()  # the slot table (zoo/core/kinds.py) is the one list
ENTRY_POINT_GROUP = "zoo.components"


class ComponentError(ValueError):
    """A component name or parameter that the registry cannot resolve."""


@dataclass(frozen=True)
class Entry:
    """One registered component: the function, its kind and name, and what it declares."""

    kind: str
    name: str
    fn: Callable[..., Any]
    decl: Declaration = field(default_factory=Declaration)
    check: Callable[..., None] | None = None

    def hyperparameters(self) -> dict[str, Any]:
        """Keyword-only parameters with their defaults (`inspect.Parameter.empty` if required); a
        component registered with `selects=True` takes keyword `step` (the update's StepView), and a
        clip rule or stage a keyword per field it declares in `reads=` (e.g. dppo's logp_rollout): data,
        not hyperparameters."""
        sig = inspect.signature(self.fn)
        data = (("step",) if self.decl.selects else ()) + self.decl.reads
        return {
            p.name: p.default
            for p in sig.parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in data
        }

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.fn) or ""


@dataclass(frozen=True)
class Component:
    """A built component: an `Entry` with its hyperparameters bound. Call it like the function,
    passing only the data arguments of its kind."""

    entry: Entry
    params: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return self.entry.kind

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def decl(self) -> Declaration:
        return self.entry.decl

    def resolved(self) -> dict[str, Any]:
        """Every hyperparameter with the value in use (defaults filled in)."""
        out = {k: v for k, v in self.entry.hyperparameters().items() if v is not inspect.Parameter.empty}
        out.update(self.params)
        return out

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, **self.resolved()}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.entry.fn(*args, **{**self.params, **kwargs})


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_loaded_builtins = False
BUILTIN_MODULES: list[str] = []  # filled by the package root (zoo/__init__.py): the core names no layer above it


def add_builtin_modules(*modules: str) -> None:
    """Name modules whose import registers built-in components; `load_builtins` imports them (once)."""
    BUILTIN_MODULES.extend(m for m in modules if m not in BUILTIN_MODULES)


def register(kind: str, name: str, *, check: Callable[..., None] | None = None, **declared: Any):
    """Decorator: register `fn` as component `name` of `kind`.

    `check(params, context)` (optional) validates hyperparameters beyond their names, e.g. c > 1;
    it raises ValueError. `context` holds run values such as `max_new_tokens` when known, else {}.
    The other keywords are the component's declarations (`zoo.core.declarations.Declaration`), e.g.
    `reads=("values",)` for GAE or `level="sequence"` for estimators that use one score per completion.

    Raises ComponentError for an unknown kind, an unknown declaration key (with a did-you-mean), or a
    name already taken by a different function.
    """
    if kind not in _REGISTRY:
        raise ComponentError(f"unknown component kind {kind!r}; kinds: {', '.join(KINDS)}")
    try:
        decl = declare(f"register({kind!r}, {name!r})", declared)
    except (ValueError, TypeError) as e:
        raise ComponentError(str(e)) from None

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        old = _REGISTRY[kind].get(name)
        if old is not None and _qualname(old.fn) != _qualname(fn):
            raise ComponentError(
                f"{kind} {name!r} is already registered by {_qualname(old.fn)}; "
                f"cannot register {_qualname(fn)} under the same name"
            )
        _REGISTRY[kind][name] = Entry(kind, name, fn, decl, check)
        return fn

    return deco


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def load_builtins() -> None:
    """Import the built-in components (`BUILTIN_MODULES`, named by zoo/__init__.py) and any installed
    `zoo.components` entry points (once)."""
    global _loaded_builtins
    if _loaded_builtins:
        return
    _loaded_builtins = True
    for mod in BUILTIN_MODULES:
        importlib.import_module(mod)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except BaseException as e:  # noqa: BLE001 - SystemExit too: an installed plugin must not end zoo silently
            if isinstance(e, KeyboardInterrupt):
                raise
            raise ComponentError(
                f"entry point {ep.name!r} ({ep.value}, group {ENTRY_POINT_GROUP}): {import_failure(e)}"
            ) from None


def import_user_module(mod: str, what: str = "plugin module") -> Any:
    """`importlib.import_module(mod)` for a module the user named (a plugin, a reward's dotted path).

    Raises ComponentError, one line naming `what`, the module, and the file and line where it failed:
    for an ImportError, a SyntaxError, any other exception raised while the module runs, and a
    `sys.exit()` / SystemExit at import (which would otherwise end zoo with no message). Ctrl-C
    (KeyboardInterrupt) passes through."""
    try:
        return importlib.import_module(mod)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit and GeneratorExit too, see the docstring
        raise ComponentError(f"{what} {mod!r} could not be imported: {import_failure(e)}") from None


def import_failure(e: BaseException) -> str:
    """Why an import failed, in one line with the file and line: `SyntaxError in plug.py, line 3:
    invalid syntax`, `it called sys.exit(0) at import (plug.py, line 2)`, `ValueError at import
    (plug.py, line 5): boom`, or an ImportError's own message."""
    if isinstance(e, SyntaxError):  # IndentationError, TabError included
        where = f" in {e.filename}, line {e.lineno}" if e.filename else ""
        return f"{type(e).__name__}{where}: {e.msg}"
    frames = traceback.extract_tb(e.__traceback__)
    user = [
        f
        for f in frames
        if "importlib" not in f.filename and not f.filename.startswith("<frozen") and f.filename != __file__
    ]  # the frames of the module being imported (and what it imports)
    # a library's frame last (e.g. a sys.exit another library wrapped, seen under pytest-xdist with Ray loaded)
    # is not where the user's module failed: its own frames first, where it lives outside the installed packages
    own = [f for f in user if "site-packages" not in f.filename and "dist-packages" not in f.filename]
    last = (own or user)[-1] if user else None
    at = f"{last.filename}, line {last.lineno}" if last else ""
    if isinstance(e, SystemExit):
        return (
            f"it called sys.exit({e.code!r}) while being imported ({at}); a plugin module must only define "
            "and register its components (put a script's code under `if __name__ == '__main__':`)"
        )
    if isinstance(e, ImportError) and not user:
        return str(e)
    first = (str(e).strip().splitlines() or [""])[0]
    return (
        f"{type(e).__name__} raised while importing it" + (f" ({at})" if at else "") + (f": {first}" if first else "")
    )


def load_plugins(modules: list[str] | tuple[str, ...] = ()) -> None:
    """Import user modules (dotted names) so their `@register` decorators run.

    Raises ComponentError naming the module, file and line when it cannot be imported (see
    `import_user_module`: also a SyntaxError, an exception or a sys.exit() in the module)."""
    load_builtins()
    for mod in modules:
        import_user_module(mod)


def available(kind: str | None = None) -> list[str] | dict[str, list[str]]:
    """Sorted names of one kind, or a dict kind -> names when kind is None."""
    load_builtins()
    if kind is None:
        return {k: sorted(v) for k, v in _REGISTRY.items()}
    _check_kind(kind)
    return sorted(_REGISTRY[kind])


def get(kind: str, name: str) -> Entry:
    """The registered entry; raises ComponentError with close matches for an unknown name."""
    load_builtins()
    _check_kind(kind)
    try:
        return _REGISTRY[kind][name]
    except KeyError:
        known = sorted(_REGISTRY[kind])
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        raise ComponentError(f"{kind} {name!r} is not registered; {hint}known: {', '.join(known)}") from None


def _check_kind(kind: str) -> None:
    if kind not in _REGISTRY:
        close = difflib.get_close_matches(kind, KINDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ComponentError(f"unknown component kind {kind!r}{hint}; kinds: {', '.join(KINDS)}")


def parse_spec(spec: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """`"ppo"` or `{"name": "ppo", "eps": 0.2}` -> ("ppo", {"eps": 0.2})."""
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping):
        if "name" not in spec:
            raise ComponentError(f"component spec {dict(spec)!r} has no 'name' key")
        params = {k: v for k, v in spec.items() if k != "name"}
        return str(spec["name"]), params
    raise ComponentError(f"component spec must be a name or a mapping with 'name', got {spec!r}")


def _number(v: Any, default: Any) -> Any:
    """YAML 1.1 reads `1e-6` (no dot) as a string. For a parameter whose default is a number or None,
    turn such an exponent string into a float; leave everything else (a quoted "1" stays a string)."""
    numeric = default is None or (isinstance(default, (int, float)) and not isinstance(default, bool))
    if isinstance(v, str) and numeric and "e" in v.lower():
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _type_error(v: Any, default: Any) -> str | None:
    """What a value must be when its type does not fit the parameter's default (None: it fits, or the
    default says nothing: required, or None). A bool default takes a bool (not "false"), an int one an
    int, a float one a number, a str one a string, a list/tuple one a list."""
    if default is inspect.Parameter.empty or default is None:
        return None
    if isinstance(default, bool):
        return None if isinstance(v, bool) else "true or false"
    if isinstance(default, int):
        return None if isinstance(v, int) and not isinstance(v, bool) else "an integer"
    if isinstance(default, float):
        return None if isinstance(v, (int, float)) and not isinstance(v, bool) else "a number"
    if isinstance(default, str):
        return None if isinstance(v, str) else "a string"
    if isinstance(default, (list, tuple)):
        return None if isinstance(v, (list, tuple)) else "a list"
    return None


def build(kind: str, spec: str | Mapping[str, Any], context: Mapping[str, Any] | None = None) -> Component:
    """Resolve a spec to a callable `Component` with its hyperparameters bound.

    Raises ComponentError when the name is unknown (listing close matches), a parameter is not one
    of the component's keyword-only parameters, a required one is missing, a value's type does not fit
    the parameter's default (`_type_error`), a float one is NaN or infinite, or its `check` rejects the values. No model or data is touched.
    """
    name, params = parse_spec(spec)
    entry = get(kind, name)
    hp = entry.hyperparameters()
    unknown = [k for k in params if k not in hp]
    if unknown:
        allowed = ", ".join(hp) or "(none)"
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, list(hp), n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ComponentError(f"{kind} {name!r}: unknown parameter {', '.join(hints)}; allowed: {allowed}")
    missing = [k for k, d in hp.items() if d is inspect.Parameter.empty and k not in params]
    if missing:
        raise ComponentError(f"{kind} {name!r}: missing required parameter {', '.join(map(repr, missing))}")
    params = {k: _number(v, hp[k]) for k, v in params.items()}
    wrong = [f"{k!r} must be {want}, got {params[k]!r}" for k in params if (want := _type_error(params[k], hp[k]))]
    if wrong:
        raise ComponentError(f"{kind} {name!r}: parameter {'; '.join(wrong)}")
    bad = [k for k, v in params.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise ComponentError(
            f"{kind} {name!r}: parameter {', '.join(map(repr, bad))} must be a finite number, "
            f"got {', '.join(repr(params[k]) for k in bad)}"
        )
    comp = Component(entry, dict(params))
    if entry.check is not None:
        try:
            entry.check(comp.resolved(), dict(context or {}))
        except (ValueError, TypeError) as e:
            raise ComponentError(f"{kind} {name!r}: {e}") from e
    return comp
