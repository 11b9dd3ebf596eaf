"""Variant Zoo: RL post-training algorithms for language models as named combinations of components."""
from zoo.registry import available, build, register  # noqa: F401

__version__ = "0.1.0"
