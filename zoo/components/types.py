"""The component record types' older path; they are `zoo.core.types` (the core's data contract)."""

from zoo.core.types import (  # noqa: F401
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
