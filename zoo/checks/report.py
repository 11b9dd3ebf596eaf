"""What a check stage found: errors (the run must not start), warnings (it starts, something is
likely wrong) and notes (worth knowing), one line each naming the file and key."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def extend(self, other: "Report", prefix: str = "") -> None:
        """Append `other`'s lines, each preceded by `prefix` (e.g. "arm grpo: ")."""
        self.errors += [prefix + m for m in other.errors]
        self.warnings += [prefix + m for m in other.warnings]
        self.notes += [prefix + m for m in other.notes]
