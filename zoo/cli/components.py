"""`zoo show NAME` for a registered component (any kind: an env, a clip rule, a reward, ...), and what
`zoo show` / `zoo diff` say when a name is of a kind they do not take (issue 37 §5)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from rich.markup import escape


def kinds_of(name: str) -> list[str]:
    """The component kinds under which `name` is registered ([] when none; plugins already loaded)."""
    from zoo.core import registry

    return [k for k, names in registry.available().items() if name in names]


def is_variant(name: str) -> bool:
    """Whether `name` is a named variant or a file (what `zoo.config.variant.load_variant` takes)."""
    from zoo.config.variant_files import available_variants

    return name in available_variants() or Path(name).suffix in (".yaml", ".yml") or Path(name).is_file()


def component_info(kind: str, name: str) -> dict[str, Any]:
    """The component's kind, name, parameters with defaults ("required" for none), source file:line
    and docstring."""
    from zoo.core import registry

    e = registry.get(kind, name)
    params = {k: ("required" if d is inspect.Parameter.empty else d) for k, d in e.hyperparameters().items()}
    try:
        src = f"{inspect.getsourcefile(e.fn)}:{inspect.getsourcelines(e.fn)[1]}"
    except (OSError, TypeError):
        src = getattr(e.fn, "__module__", "?")
    return {"kind": kind, "name": name, "parameters": params, "source": src, "doc": e.doc}


def show_component(name: str, kinds: list[str], console: Any, as_json: bool) -> None:
    """Print each registered component `name` (one per kind it is registered under)."""
    from zoo.cli.common import print_json

    infos = [component_info(k, name) for k in kinds]
    if as_json:
        print_json(infos[0] if len(infos) == 1 else infos)
        return
    for i in infos:
        params = ", ".join(f"{k}={v!r}" for k, v in i["parameters"].items()) or "(none)"
        console.print(f"[bold]{escape(name)}[/]  a registered {i['kind']} (not a variant)")
        console.print(f"parameters: {escape(params)}\nsource: [dim]{escape(i['source'])}[/]\n{escape(i['doc'])}\n")


def not_a_variant(name: str, command: str) -> str | None:
    """What `command` says when `name` is no variant but a registered component ("'calculator' is an
    env, not a variant: ..."), else None."""
    if is_variant(name):
        return None
    kinds = kinds_of(name)
    if not kinds:
        return None
    return (
        f"{name!r} is a registered {' and '.join(kinds)}, not a variant: {command} takes variants "
        f"(zoo list variants); `zoo show {name}` shows the {kinds[0]}"
    )
