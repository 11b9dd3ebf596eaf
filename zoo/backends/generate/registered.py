"""Importing this module registers the built-in generators (`zoo.core.registry.load_builtins` does)."""

from zoo.backends.generate import hf_generator, noisy, vllm  # noqa: F401  (the imports register them)
