"""Variant Zoo: RL post-training algorithms for language models as named combinations of components."""

from zoo.core import registry as _registry
from zoo.core.registry import available, build, register  # noqa: F401

# the modules whose import registers the built-in components; the core's registry imports them on first use
_registry.add_builtin_modules("zoo.components", "zoo.rewards", "zoo.backends.generate.registered", "zoo.envs")

from zoo.core.version import VERSION as __version__  # noqa: E402,F401
