"""Moved to `zoo.checks.reward_reads` (the one check pipeline); re-exported here for older imports."""
from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:  # lazy: zoo.checks sits above zoo.components in the layer order
    if name == "check_reward_reads":
        from zoo.checks.reward_reads import check_reward_reads

        return check_reward_reads
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
