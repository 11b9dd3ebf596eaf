"""A YAML loader for zoo's own files (variants, runs, studies, reward-model configs) that refuses a
key given twice in one mapping: PyYAML's safe loader keeps the last one silently, so a second
`budget:` or `variant:` would replace the first without a word. `too_deep` finds nesting deeper than
`MAX_NESTING`, which would exhaust Python's recursion in whatever reads the value next."""

from __future__ import annotations

from typing import Any

import yaml

MAX_NESTING = 64  # levels of mappings/lists a zoo file may nest (deeper input would exhaust recursion downstream)


class StrictSafeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that raises `yaml.constructor.ConstructorError` (a `yaml.YAMLError`) on a
    duplicate mapping key, naming the key and both lines."""


def _mapping(loader: StrictSafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            continue  # let the base constructor report an unhashable key
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"key {key!r} is given twice (first on line {seen[key] + 1}); the second would silently replace "
                "the first",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


StrictSafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(stream) -> object:
    """Parse one YAML document like `yaml.safe_load`, refusing duplicate keys."""
    return yaml.load(stream, Loader=StrictSafeLoader)  # noqa: S506 (a SafeLoader subclass)


def too_deep(data: Any, limit: int | None = None) -> str | None:
    """The start of the key path (`set.a.0.b.<...>`) along which mappings and lists in `data` nest more than `limit`
    (default MAX_NESTING) levels, else None. Iterative, so it cannot itself exhaust the stack; a node
    shared through YAML aliases is walked again only when reached deeper, so an alias bomb stays cheap
    and an alias cycle counts as too deep."""
    limit = MAX_NESTING if limit is None else limit
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    deepest: dict[int, int] = {}
    while stack:
        node, path = stack.pop()
        if len(path) > limit:
            return ".".join(path[:4]) + ".<...>"
        if isinstance(node, (dict, list)):
            if deepest.get(id(node), -1) >= len(path):
                continue
            deepest[id(node)] = len(path)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend((v, path + (str(k),)) for k, v in items)
    return None
