"""Which runs the statistics over seeds use: only finished ones. A run killed at step 22 of 30 has no
final numbers (its step-22 reward is not a final reward, and it has no after-training eval), so it is
left out of the IQMs and comparisons (zoo.study.report.seed_stats), and the report says which and why.
The side-by-side table still lists every run with its status (zoo.study.report.table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zoo.study.report.runs import ArmGroup, RunData


@dataclass
class LeftOut:
    """A run of an arm the statistics do not use: its status, the last step it logged a reward at
    (None: none) and the steps it was to train for (None where its config does not say)."""

    arm: str
    run: str
    status: str
    step: int | None
    steps: int | None

    @property
    def message(self) -> str:
        """ "grpo-s1 unfinished at step 22 of 30: left out of the statistics"."""
        at = "before its first step" if self.step is None else f"at step {self.step}"
        of = f" of {self.steps}" if self.steps is not None and self.step is not None else ""
        return f"{self.run} {self.status} {at}{of}: left out of the statistics"


def finished_runs(g: ArmGroup) -> list[RunData]:
    """The arm's runs whose status is 'finished' (summary.json written at the end of training)."""
    return [r for r in g.runs if r.status == "finished"]


def planned_steps(r: RunData) -> int | None:
    """budget.steps of the run's config.yaml (else of summary.json's config), None if neither says."""
    for cfg in (r.config, r.summary.get("config") or {}):
        steps = (cfg.get("budget") or {}).get("steps") if isinstance(cfg, dict) else None
        if isinstance(steps, int) and not isinstance(steps, bool):
            return steps
    return None


def left_out(groups: list[ArmGroup]) -> list[LeftOut]:
    """Every run not finished (unfinished, failed, interrupted, pending), arm by arm in order."""
    out = []
    for g in groups:
        for r in g.runs:
            if r.status != "finished":
                last = max(r.series("reward/total"), default=None)
                out.append(LeftOut(g.name, r.label, r.status, last, planned_steps(r)))
    return out


def messages(items: list[LeftOut], names: int = 3) -> list[str]:
    """The report's lines for `items`: one per run, but the runs pending before their first step (the
    other shards' arms under `zoo ablate --shard`, 99 of a 100-arm study) in one line with their count
    and the first `names` of them: "9 runs pending before their first step (grpo-s1, grpo-s2, grpo-s3
    and 6 more): left out of the statistics"."""
    pending = [x.run for x in items if x.status == "pending" and x.step is None]
    if len(pending) < 2:
        return [x.message for x in items]
    more = f" and {len(pending) - names} more" if len(pending) > names else ""
    line = f"{len(pending)} runs pending before their first step ({', '.join(pending[:names])}{more})"
    return [x.message for x in items if x.run not in pending] + [f"{line}: left out of the statistics"]


def to_json(items: list[LeftOut]) -> list[dict[str, Any]]:
    """[{arm, run, status, step, steps, message}] for report.json's "left_out"."""
    return [
        {"arm": x.arm, "run": x.run, "status": x.status, "step": x.step, "steps": x.steps, "message": x.message}
        for x in items
    ]
