"""A YAML loader for zoo's own files (variants, runs, studies, reward-model configs) that refuses a
key given twice in one mapping: PyYAML's safe loader keeps the last one silently, so a second
`budget:` or `variant:` would replace the first without a word."""
from __future__ import annotations

import yaml


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
                "while reading a mapping", node.start_mark,
                f"key {key!r} is given twice (first on line {seen[key] + 1}); the second would silently replace "
                "the first", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


StrictSafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(stream) -> object:
    """Parse one YAML document like `yaml.safe_load`, refusing duplicate keys."""
    return yaml.load(stream, Loader=StrictSafeLoader)  # noqa: S506 (a SafeLoader subclass)
