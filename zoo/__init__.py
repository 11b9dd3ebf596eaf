"""Variant Zoo: RL post-training algorithms for language models as named combinations of components.

The public import surface is this module (`__all__`): the registry (`register`, `build`, `available`),
the record between the stages of a step (`Batch`) and the records components take and return
(`AdvantageInputs`, `ClipResult`, `TermInputs`, ...; docs/reference/components.md, "Call contract per kind").

    from zoo import build, register, Batch, AdvantageInputs

`import zoo` does not import torch (the `zoo` command picks its CPU threads before torch loads,
zoo/run/threads.py): the records are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zoo.core import registry as _registry
from zoo.core.registry import available, build, register

# the modules whose import registers the built-in components; the core's registry imports them on first use
_registry.add_builtin_modules(
    "zoo.components",
    "zoo.rewards",
    "zoo.backends.generate.registered",
    "zoo.envs",
    "zoo.models.teacher",
)

from zoo.core.version import VERSION as __version__  # noqa: E402,F401

__all__ = [
    "register",
    "build",
    "available",
    # imported on first access (`__getattr__`): they import torch
    "Batch",
    "AdvantageInputs",
    "AdvantageResult",
    "ClipResult",
    "LengthResult",
    "LengthRows",
    "StepCounts",
    "StepView",
    "TermInputs",
    "TermResult",
]
_LAZY = {name: "zoo.core.batch" if name == "Batch" else "zoo.core.types" for name in __all__[3:]}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time `__getattr__` imports them
    from zoo.core.batch import Batch
    from zoo.core.types import (
        AdvantageInputs,
        AdvantageResult,
        ClipResult,
        LengthResult,
        LengthRows,
        StepCounts,
        StepView,
        TermInputs,
        TermResult,
    )


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
