"""Guards that stop a run which cannot learn, instead of letting it "finish" (docs/configuration.md,
"Guards"): rewards that cannot score most rows, optimizer steps skipped for non-finite values,
non-finite weights, and a run with no optimizer step at all.

    state = GuardState()
    after_step(state, cfg.guards, step, metrics)      # raises RunFailed; logs a step without updates
    check_finite_weights(models, step, last_saved)     # raises RunFailed before a checkpoint
    at_end(state, steps)                               # raises RunFailed when nothing was updated

Every decision reads the step's metrics after they were reduced over ranks, so under data
parallelism every rank decides the same.
"""
from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import torch

from zoo import dist

log = logging.getLogger(__name__)

#: the quantities an optimizer step must have finite, in the order a failure names them
NONFINITE_KEYS = ("loss/policy", "loss/kl", "loss/value", "optim/grad_norm", "critic/grad_norm")


class RunFailed(RuntimeError):
    """A run that cannot go on or learn: it ends with status `failed` and this message."""


class RewardError(RunFailed):
    """A reward function broke its contract (one finite float or None per completion)."""


@dataclass
class GuardState:
    """What the guards count across steps (saved in checkpoints, so a resume keeps the streaks).

    unscored_steps: consecutive steps whose `reward/unscored_frac` exceeded the limit.
    skipped_steps: consecutive steps in which every optimizer step was skipped (non-finite).
    updates: optimizer steps applied since the start (None: unknown, resumed from a checkpoint
    written before this counter existed). no_update: reason -> steps without an update."""

    unscored_steps: int = 0
    skipped_steps: int = 0
    updates: int | None = 0
    no_update: dict[str, int] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        """Plain ints, None and strings (loadable with torch.load(weights_only=True))."""
        return {"unscored_steps": self.unscored_steps, "skipped_steps": self.skipped_steps,
                "updates": self.updates, "no_update": dict(self.no_update)}

    def load_state_dict(self, d: Mapping[str, Any] | None) -> None:
        """Restore from `state_dict()`; None (an older checkpoint) makes the update count unknown."""
        if d is None:
            self.unscored_steps = self.skipped_steps = 0
            self.updates, self.no_update = None, {}
            return
        self.unscored_steps, self.skipped_steps = int(d["unscored_steps"]), int(d["skipped_steps"])
        self.updates = None if d["updates"] is None else int(d["updates"])
        self.no_update = {str(k): int(v) for k, v in d["no_update"].items()}


def any_rank_nonfinite(values: Iterable[float]) -> bool:
    """Whether any of `values` (an optimizer step's losses and gradient norms) is NaN/inf on any rank:
    a collective under data parallelism (the flag is summed over ranks), so every rank skips alike."""
    bad = float(any(not math.isfinite(float(v)) for v in values))
    return float(dist.all_reduce_sum(torch.tensor([bad], dtype=torch.float64))[0]) > 0


def quiet_scheduler_step(scheduler: Any) -> None:
    """`scheduler.step()` without PyTorch's "lr_scheduler.step() before optimizer.step()" warning,
    which a skipped first optimizer step would trigger."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*optimizer.step", category=UserWarning)
        scheduler.step()


def first_nonfinite(m: Mapping[str, Any]) -> list[str]:
    """The keys of NONFINITE_KEYS whose value in `m` is not finite, in that order."""
    return [k for k in NONFINITE_KEYS if k in m and not math.isfinite(float(m[k]))]


def no_update_reason(m: Mapping[str, Any]) -> str | None:
    """Why a step applied no optimizer step (`optim/updates` == 0), or trained on nothing because the
    rollout correction masked every token (`rollout/masked_frac` 1: its steps ran on a zero loss);
    None when it trained."""
    if float(m.get("rollout/masked_frac", 0.0)) >= 1.0:
        return ("the rollout correction masked every token (rollout/masked_frac 1.0): its bounds are too tight "
                "for the sampler's mismatch (widen c_low / c_high)")
    if float(m.get("optim/updates", 1.0)) > 0:
        return None
    if float(m.get("train/skipped", 0.0)) > 0:
        return "every group was filtered out by the sampling filter"
    if float(m.get("optim/skipped", 0.0)) > 0:
        bad = first_nonfinite(m)
        return "every optimizer step was skipped: " + (f"{bad[0]} is not finite" if bad else "non-finite values")
    return "no completion token was left to train on (every row's loss mask was cleared)"


def after_step(state: GuardState, guards: Any, step: int, m: Mapping[str, Any]) -> None:
    """Count step `step`'s metrics `m` (reduced over ranks) and stop the run when a guard trips.

    guards: the run's `Guards` config (max_unscored_frac, unscored_steps, max_skipped_steps).
    Logs a warning for a step without an update. Raises RunFailed when more than
    `max_unscored_frac` of the rows could not be scored by some reward for `unscored_steps`
    consecutive steps, or when every optimizer step was skipped for `max_skipped_steps`
    consecutive steps (naming the first non-finite quantity)."""
    frac = float(m.get("reward/unscored_frac", 0.0))
    state.unscored_steps = state.unscored_steps + 1 if frac > guards.max_unscored_frac else 0
    if state.unscored_steps >= guards.unscored_steps:
        raise RunFailed(
            f"step {step}: rewards could not score {frac:.0%} of the rows (more than guards.max_unscored_frac = "
            f"{guards.max_unscored_frac:g}) for {state.unscored_steps} consecutive steps (guards.unscored_steps = "
            f"{guards.unscored_steps}); see the reward warnings above and reward/unscored_frac in metrics.jsonl")
    reason = no_update_reason(m)
    if reason is None:
        state.skipped_steps = 0
        if state.updates is not None:
            state.updates += int(m.get("optim/updates", 0))
        return
    state.no_update[reason.split(":")[0]] = state.no_update.get(reason.split(":")[0], 0) + 1
    log.warning("step %d: nothing trained: %s", step, reason)
    all_skipped = float(m.get("optim/skipped", 0.0)) > 0
    state.skipped_steps = state.skipped_steps + 1 if all_skipped else 0
    if state.skipped_steps >= guards.max_skipped_steps:
        bad = first_nonfinite(m)
        raise RunFailed(
            f"step {step}: every optimizer step was skipped for {state.skipped_steps} consecutive steps "
            f"(guards.max_skipped_steps = {guards.max_skipped_steps}) because "
            f"{', '.join(f'{k} = {float(m[k])}' for k in bad) or 'a loss or gradient norm'} is not finite; "
            "try a lower optim.lr, float32 weights (model_opts.dtype) or autocast: none")


def at_end(state: GuardState, steps: int) -> None:
    """Raise RunFailed when a run of `steps` rollout steps applied no optimizer step at all, saying
    why (the reasons of its steps). Nothing is checked when the count is unknown (old checkpoint)."""
    if state.updates is None or state.updates > 0 or steps == 0:
        return
    why = "; ".join(f"{reason} ({n} of {steps} steps)" for reason, n in state.no_update.items()) or "unknown"
    raise RunFailed(f"no optimizer step trained the policy in {steps} steps, so it never changed: {why}")


def check_finite_weights(models: Any, step: int, last_saved: int | None) -> None:
    """Raise RunFailed when a trainable parameter of the policy or critic is NaN/inf after step
    `step`: such weights are never checkpointed. last_saved: the step of the last checkpoint written
    (None: none yet), named in the message. models: `engine.Models`."""
    for role, model in (("policy", models.policy), ("critic", models.critic)):
        if model is None:
            continue
        for name, p in model.named_parameters():
            if p.requires_grad and not bool(torch.isfinite(p.detach()).all()):
                kept = f"the last checkpoint (step {last_saved}) is kept" if last_saved else "no checkpoint was written"
                raise RunFailed(
                    f"step {step}: {role} parameter {name!r} is not finite after the optimizer step; refusing "
                    f"to checkpoint non-finite weights ({kept}); a common cause is float16 weights, where AdamW's "
                    "eps (1e-8) underflows to 0: use model_opts.dtype float32 or bfloat16, or a lower optim.lr")
