"""Warnings for a run that goes on but learns little or diverges (docs/reference/guards.md, "Guards"):
most groups carried no correctness signal for several steps, the policy's entropy rose far above its
start, or the KL to the reference jumped. Each warns once per run, naming the step and the metric, and
its step goes to summary.json (`WatchState.totals`), where the study report reads it to mark the arm.

    state = WatchState()                 # held by zoo.core.guards.GuardState (saved in checkpoints)
    after_step(state, step, metrics)     # logs each warning once
    state.totals()                       # {"guards/low_signal_step": 4.0, ...} for summary.json

The thresholds are ours, not from a paper, and not calibrated on a grid of runs: a signal streak long
enough that one step's unlucky draw of prompts does not warn; an entropy factor and KL levels meant to
catch climbs like the lr-1e-3 runs of issue 30 (entropy 0.10 -> 0.88 within four steps) while leaving
the slow drift of a run that learns alone.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

log = logging.getLogger("zoo.core.guards")  # the guards' logger: one place to filter the run's warnings

#: a step counts as low-signal when more than this fraction of its groups carried no correctness signal
LOW_SIGNAL_FRAC = 0.5
#: consecutive low-signal steps before the warning. Our choice: with a handful of prompts per step one
#: step can be an unlucky draw; three in a row is the task (or the sampling) rather than chance
LOW_SIGNAL_STEPS = 3
#: entropy warning: the step's policy entropy above ENTROPY_RISE x the mean of the first ENTROPY_BASE_STEPS
#: steps' entropies (steps that trained) and at least ENTROPY_MIN_RISE nats above it. Our choice: 3x
#: leaves room for the drift of a run that learns, and the 0.10 -> 0.88 climb of issue 30 is 8.8x; the
#: floor keeps a near-0 start from turning noise into a "rise"
ENTROPY_RISE = 3.0
ENTROPY_BASE_STEPS = 2
ENTROPY_MIN_RISE = 0.1
#: KL warning: `kl/ref` (nats per token) above KL_LIMIT, or above KL_JUMP x its mean over the previous
#: KL_RECENT steps while at least KL_JUMP_MIN. Our choice: a per-token KL of 0.5 nats is far beyond what a
#: fine-tuned policy that still resembles its reference shows; a 5x jump in one step is not drift
KL_LIMIT = 0.5
KL_JUMP = 5.0
KL_RECENT = 3
KL_JUMP_MIN = 0.05
#: the levers named by the low-signal warning (docs/reference/guards.md, "Guards")
SIGNAL_LEVERS = (
    "a larger budget.group_size, an easier task or worked examples (task.fewshot), a higher sampling.temperature"
)


@dataclass
class WatchState:
    """What the warnings count across steps. low_signal_streak: consecutive low-signal steps;
    entropy_base: the entropies of the first ENTROPY_BASE_STEPS steps that trained; kl_recent: the last
    KL_RECENT values of kl/ref; warned: warning name ("low_signal", "entropy_rise", "kl_jump") -> the
    step it was given at."""

    low_signal_streak: int = 0
    entropy_base: list[float] = field(default_factory=list)
    kl_recent: list[float] = field(default_factory=list)
    warned: dict[str, int] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        """Plain ints, floats and strings (loadable with torch.load(weights_only=True))."""
        return {
            "low_signal_streak": self.low_signal_streak,
            "entropy_base": list(self.entropy_base),
            "kl_recent": list(self.kl_recent),
            "warned": dict(self.warned),
        }

    def load_state_dict(self, d: Mapping[str, Any] | None) -> None:
        """Restore from `state_dict()`; None (a checkpoint written before these warnings) starts afresh."""
        d = d or {}
        self.low_signal_streak = int(d.get("low_signal_streak") or 0)
        self.entropy_base = [float(x) for x in d.get("entropy_base") or []]
        self.kl_recent = [float(x) for x in d.get("kl_recent") or []]
        self.warned = {str(k): int(v) for k, v in (d.get("warned") or {}).items()}

    def totals(self) -> dict[str, float]:
        """For summary.json: `guards/<warning>_step` -> the step of each warning given (none: absent)."""
        return {f"guards/{k}_step": float(v) for k, v in sorted(self.warned.items())}


def after_step(state: WatchState, step: int, m: Mapping[str, Any]) -> None:
    """Count step `step`'s metrics `m` (reduced over ranks) and log each warning the first time it trips."""
    _check_signal(state, step, m)
    _check_entropy(state, step, m)
    _check_kl(state, step, m)


def signal_of(m: Mapping[str, Any]) -> tuple[str, float] | None:
    """(key, value) of the step's signal per group: groups/correct_signal_frac with a correctness reward,
    else groups/signal_frac; None when neither is logged or it is not finite."""
    for key in ("groups/correct_signal_frac", "groups/signal_frac"):
        v = m.get(key)
        if v is not None and math.isfinite(float(v)):
            return key, float(v)
    return None


def _check_signal(state: WatchState, step: int, m: Mapping[str, Any]) -> None:
    sig = signal_of(m)
    if sig is None:
        return
    key, frac = sig
    state.low_signal_streak = state.low_signal_streak + 1 if 1.0 - frac > LOW_SIGNAL_FRAC else 0
    if state.low_signal_streak >= LOW_SIGNAL_STEPS and "low_signal" not in state.warned:
        state.warned["low_signal"] = step
        what = "correctness" if key == "groups/correct_signal_frac" else "reward"
        log.warning(
            "step %d: %.0f%% of the groups carried no %s signal (%s %.2f), more than half for %d consecutive "
            "steps: every completion of such a group scored alike (all wrong or all right), so its advantages "
            "are 0 and it teaches nothing; levers: %s",
            step,
            100 * (1.0 - frac),
            what,
            key,
            frac,
            state.low_signal_streak,
            SIGNAL_LEVERS,
        )


def _check_entropy(state: WatchState, step: int, m: Mapping[str, Any]) -> None:
    ent = float(m.get("entropy", math.nan))
    if not math.isfinite(ent):  # no token trained this step (NaN): nothing to compare
        return
    if len(state.entropy_base) < ENTROPY_BASE_STEPS:
        state.entropy_base.append(ent)
        return
    base = statistics.fmean(state.entropy_base)
    if ent > ENTROPY_RISE * base and ent - base >= ENTROPY_MIN_RISE and "entropy_rise" not in state.warned:
        state.warned["entropy_rise"] = step
        log.warning(
            "step %d: the policy's entropy %.3g is %.1fx its start (%.3g, the mean of its first %d steps; the "
            "warning is at %gx): the policy is moving away from what it knew and may be diverging; "
            "try a lower optim.lr",
            step,
            ent,
            ent / base if base > 0 else math.inf,
            base,
            ENTROPY_BASE_STEPS,
            ENTROPY_RISE,
        )


def _check_kl(state: WatchState, step: int, m: Mapping[str, Any]) -> None:
    kl = float(m.get("kl/ref", math.nan))
    if not math.isfinite(kl):  # not logged (kl: none) or no token trained
        return
    recent = statistics.fmean(state.kl_recent) if len(state.kl_recent) == KL_RECENT else None
    state.kl_recent = (state.kl_recent + [kl])[-KL_RECENT:]
    jumped = recent is not None and kl >= KL_JUMP_MIN and kl > KL_JUMP * recent
    if (kl > KL_LIMIT or jumped) and "kl_jump" not in state.warned:
        state.warned["kl_jump"] = step
        why = f"above {KL_LIMIT:g} nats per token" if kl > KL_LIMIT else f"more than {KL_JUMP:g}x"
        log.warning(
            "step %d: the KL to the reference jumped: kl/ref %.3g (%s; its mean over the previous %d steps %s): "
            "the policy is leaving its reference fast and may be diverging; try a lower optim.lr",
            step,
            kl,
            why,
            KL_RECENT,
            "was not yet known" if recent is None else f"{recent:.3g}",
        )
