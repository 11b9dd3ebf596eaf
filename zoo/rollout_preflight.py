"""Moved to `zoo.checks.context` (the one check pipeline's `after_load` stage); re-exported here for
older imports."""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:  # lazy: zoo.checks sits above this module in the layer order
    if name in ("check_context", "longest_prompt_tokens", "LONGEST_SAMPLE"):
        from zoo.checks import context

        return getattr(context, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
