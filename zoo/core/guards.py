"""Guards that stop a run which cannot learn, instead of letting it "finish" (docs/reference/guards.md,
"Guards"): rewards that cannot score most rows (or a reward that never scored any), optimizer steps
skipped for non-finite values (counted and warned), a policy that collapsed to the uniform
distribution (warned), non-finite weights, and a run with no optimizer step at all; zoo.core.watch
warns (once each) when most groups carry no signal, or entropy or the KL to the reference jump.

    state = GuardState()
    after_step(state, cfg.guards, step, metrics, rewards=names, vocab=V)  # raises RunFailed; warns
    check_finite_weights(models, step, last_saved)     # raises RunFailed before a checkpoint
    at_end(state, steps)                               # raises RunFailed when nothing was updated
    state.totals()                                     # the run's counts for summary.json

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

from zoo.core import dist, watch

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
    written before this counter existed). no_update: reason -> steps without an update.
    unscored_all_steps: steps in which some reward scored none of the rows (while the guard is on:
    guards.max_unscored_frac < 1). unscored_by: reward name -> steps in which it scored no row.
    skipped_total / optim_steps: optimizer steps skipped for non-finite values / attempted, since
    the start. collapsed_steps: steps whose policy entropy was at its maximum ln |V| after an update.
    no_grad_steps: consecutive steps with a zero gradient norm although the advantages were not all 0.
    watch: the warnings for little signal and divergence (zoo.core.watch)."""

    unscored_steps: int = 0
    skipped_steps: int = 0
    updates: int | None = 0
    no_update: dict[str, int] = field(default_factory=dict)
    unscored_all_steps: int = 0
    unscored_by: dict[str, int] = field(default_factory=dict)
    skipped_total: int = 0
    optim_steps: int = 0
    collapsed_steps: int = 0
    no_grad_steps: int = 0
    watch: watch.WatchState = field(default_factory=watch.WatchState)

    def state_dict(self) -> dict[str, Any]:
        """Plain ints, None and strings (loadable with torch.load(weights_only=True))."""
        return {
            "unscored_steps": self.unscored_steps,
            "skipped_steps": self.skipped_steps,
            "updates": self.updates,
            "no_update": dict(self.no_update),
            "unscored_all_steps": self.unscored_all_steps,
            "unscored_by": dict(self.unscored_by),
            "skipped_total": self.skipped_total,
            "optim_steps": self.optim_steps,
            "collapsed_steps": self.collapsed_steps,
            "no_grad_steps": self.no_grad_steps,
            "watch": self.watch.state_dict(),
        }

    def load_state_dict(self, d: Mapping[str, Any] | None) -> None:
        """Restore from `state_dict()`; None (an older checkpoint) makes the update count unknown; counts
        an older checkpoint lacks restart at 0 (a count of unscored steps then stays below the run's
        steps, so `at_end` decides nothing from it)."""
        if d is None:
            self.__init__(updates=None)  # type: ignore[misc]
            return
        self.unscored_steps, self.skipped_steps = int(d["unscored_steps"]), int(d["skipped_steps"])
        self.updates = None if d["updates"] is None else int(d["updates"])
        self.no_update = {str(k): int(v) for k, v in d["no_update"].items()}
        self.unscored_by = {str(k): int(v) for k, v in (d.get("unscored_by") or {}).items()}
        for k in ("unscored_all_steps", "skipped_total", "optim_steps", "collapsed_steps", "no_grad_steps"):
            setattr(self, k, int(d.get(k) or 0))
        self.watch.load_state_dict(d.get("watch"))

    def totals(self) -> dict[str, float]:
        """The run's counts for summary.json: optimizer steps skipped (non-finite) and attempted, and
        steps in which the policy was collapsed (entropy at ln |V|), the steps of the warnings given
        (zoo.core.watch: guards/low_signal_step, guards/entropy_rise_step, guards/kl_jump_step)."""
        return {
            "optim/skipped_total": float(self.skipped_total),
            "optim/steps_total": float(self.optim_steps),
            "guards/collapsed_steps": float(self.collapsed_steps),
            **self.watch.totals(),
        }


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
        return (
            "the rollout correction masked every token (rollout/masked_frac 1.0): its bounds are too tight "
            "for the sampler's mismatch (widen c_low / c_high)"
        )
    if float(m.get("optim/updates", 1.0)) > 0:
        return None
    if float(m.get("train/skipped", 0.0)) > 0:
        return "every group was filtered out by the sampling filter"
    if float(m.get("optim/skipped", 0.0)) > 0:
        bad = first_nonfinite(m)
        return "every optimizer step was skipped: " + (f"{bad[0]} is not finite" if bad else "non-finite values")
    return "no completion token was left to train on (every row's loss mask was cleared)"


#: a step whose mean token entropy is within this fraction of ln |V| sampled from a uniform policy
COLLAPSE_REL = 1e-4
#: consecutive steps with a zero gradient norm (while the advantages were not all 0) before a warning
NO_GRAD_STEPS = 2


def after_run_step(st: Any, m: Mapping[str, Any]) -> None:
    """`after_step` for the trainer's run state `st` (zoo.step.types.RunState) after step `st.step`:
    its guards config, reward names, and the policy's vocabulary size for the collapse check."""
    config = getattr(st.models.policy, "config", None)
    after_step(
        st.guard,
        st.cfg.guards,
        st.step,
        m,
        rewards=st.reward_names,
        vocab=getattr(config, "vocab_size", None),
        hint=divergence_hint(st.cfg),
    )


def divergence_hint(cfg: Any) -> str:
    """The run keys most likely behind weights or probabilities that blew up, for a message:
    `optim.weight_decay` when lr x weight_decay >= 1 (AdamW's decay factor 1 - lr x wd is <= 0, so
    the weights flip sign and grow every step), else `optim.lr`. cfg: the RunConfig."""
    lr, wd = float(cfg.optim.lr), float(cfg.optim.weight_decay)
    if lr * wd >= 1.0:
        return (
            f"optim.weight_decay = {wd:g} (with optim.lr = {lr:g}, AdamW's decay factor 1 - lr x weight_decay "
            f"= {1 - lr * wd:g} makes the weights grow without bound; use a weight_decay below 1 / lr)"
        )
    return f"optim.lr = {lr:g} too high?" + (f" (or optim.weight_decay = {wd:g})" if wd > 0 else "")


def after_step(
    state: GuardState,
    guards: Any,
    step: int,
    m: Mapping[str, Any],
    *,
    rewards: Iterable[str] = (),
    vocab: int | None = None,
    hint: str = "optim.lr too high?",
) -> None:
    """Count step `step`'s metrics `m` (reduced over ranks) and stop the run when a guard trips.

    guards: the run's `Guards` config (max_unscored_frac, unscored_steps, max_skipped_steps).
    rewards: the run's reward names (their `reward/<name>` means are NaN in a step where they scored
    no row). vocab: the policy's vocabulary size |V| (None: no collapse check). hint: the likely
    key, for the collapse warning (`divergence_hint`).
    Logs a warning for a step without an update, for optimizer steps skipped (non-finite), for a
    policy whose entropy reached its maximum ln |V| after an update (collapsed to uniform), for
    NO_GRAD_STEPS steps in a row with a zero gradient norm although the advantages were not all 0,
    and once each for little signal per group, an entropy rise and a KL jump (zoo.core.watch).
    Raises RunFailed when more than `max_unscored_frac` of the rows could not be scored by some
    reward for `unscored_steps` consecutive steps, or when every optimizer step was skipped for
    `max_skipped_steps` consecutive steps (naming the first non-finite quantity)."""
    _count_scored(state, guards, m, rewards)
    _count_skipped(state, step, m)
    _check_collapse(state, step, m, vocab, hint)
    watch.after_step(state.watch, step, m)  # little signal, entropy rise, KL jump: warned once each
    frac = float(m.get("reward/unscored_frac", 0.0))
    state.unscored_steps = state.unscored_steps + 1 if frac > guards.max_unscored_frac else 0
    if state.unscored_steps >= guards.unscored_steps:
        raise RunFailed(
            f"step {step}: rewards could not score {frac:.0%} of the rows (more than guards.max_unscored_frac = "
            f"{guards.max_unscored_frac:g}) for {state.unscored_steps} consecutive steps (guards.unscored_steps = "
            f"{guards.unscored_steps}); see the reward warnings above and reward/unscored_frac in metrics.jsonl"
        )
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
            "try a lower optim.lr, float32 weights (model_opts.dtype) or autocast: none"
        )


def _count_scored(state: GuardState, guards: Any, m: Mapping[str, Any], rewards: Iterable[str]) -> None:
    """Count a step in which some reward scored none of the rows (`reward/unscored_frac`, the worst
    reward's unscored fraction, is 1; not counted with the guard off, max_unscored_frac 1) and, per
    reward, the steps in which it scored none."""
    frac = float(m.get("reward/unscored_frac", 0.0))
    if frac >= 1.0 and frac > guards.max_unscored_frac:
        state.unscored_all_steps += 1
    for name in rewards:
        v = m.get(f"reward/{name}")
        if v is not None and math.isnan(float(v)):
            state.unscored_by[name] = state.unscored_by.get(name, 0) + 1


def _count_skipped(state: GuardState, step: int, m: Mapping[str, Any]) -> None:
    """Add the step's optimizer steps (`optim/steps`) and those skipped for non-finite values
    (`optim/skipped`) to the run's totals; warn when some were skipped but not all (a step where
    all were skipped is warned as "nothing trained")."""
    skipped, steps = round(float(m.get("optim/skipped", 0.0))), round(float(m.get("optim/steps", 0.0)))
    state.skipped_total += skipped
    state.optim_steps += steps
    if skipped and float(m.get("optim/updates", 0.0)) > 0:
        bad = first_nonfinite(m)
        log.warning(
            "step %d: %d of %d optimizer steps skipped because %s not finite (%d skipped in this run so far; "
            "the weights are unchanged by those)",
            step,
            skipped,
            steps,
            ", ".join(bad) + (" is" if len(bad) == 1 else " are") if bad else "a loss or gradient norm is",
            state.skipped_total,
        )


def _check_collapse(state: GuardState, step: int, m: Mapping[str, Any], vocab: int | None, hint: str) -> None:
    """Warn when the policy collapsed after an update: its mean token entropy is ln |V| (within
    COLLAPSE_REL: every token equally likely), or its gradient norm was 0 for NO_GRAD_STEPS steps in
    a row while the advantages were not all 0 (the loss no longer moves it)."""
    updated = bool(state.updates) or state.updates is None
    ent = float(m.get("entropy", math.nan))
    if vocab and vocab > 1 and updated and math.isfinite(ent) and ent >= (1.0 - COLLAPSE_REL) * math.log(vocab):
        state.collapsed_steps += 1
        if state.collapsed_steps == 1:
            log.warning(
                "step %d: the policy collapsed to the uniform distribution: its entropy %.6g is the maximum "
                "ln |V| = ln %d = %.6g (every token equally likely), so it samples noise and cannot learn; "
                "the previous updates destroyed it: %s",
                step,
                ent,
                vocab,
                math.log(vocab),
                hint,
            )
    grad, adv_std = m.get("optim/grad_norm"), m.get("adv/std")
    no_grad = (
        float(m.get("optim/updates", 0.0)) > 0
        and grad is not None
        and float(grad) == 0.0
        and adv_std is not None
        and float(adv_std) > 0
    )
    state.no_grad_steps = state.no_grad_steps + 1 if no_grad else 0
    if state.no_grad_steps == NO_GRAD_STEPS:
        log.warning(
            "step %d: the policy's gradient norm was exactly 0 for %d steps in a row although the advantages "
            "were not (adv/std %.3g): the policy no longer responds to its loss (collapsed or saturated "
            "weights?): %s",
            step,
            NO_GRAD_STEPS,
            float(adv_std),
            hint,
        )


def at_end(state: GuardState, steps: int) -> None:
    """Raise RunFailed when in every one of the run's `steps` rollout steps some reward scored no row
    (naming the rewards that never scored one; not with guards.max_unscored_frac 1), or no optimizer step was applied at all (saying why:
    the reasons of its steps); whatever the run's length. Warn when optimizer steps were skipped.
    Nothing is checked when a count is unknown (resumed from an older checkpoint)."""
    if steps > 0 and state.unscored_all_steps >= steps:
        never = [n for n, k in state.unscored_by.items() if k >= steps]
        who = (
            f"reward {', '.join(map(repr, never))} scored none of the completions"
            if never
            else "in every step some reward scored none of the completions"
        )
        raise RunFailed(
            f"no completion was scored in the {steps} step(s) of this run: {who} (every value was None "
            "or every call raised; see the reward warnings above), so reward/total is NaN and the run "
            "measured nothing; fix the reward or remove it from `rewards`"
        )
    if state.skipped_total:
        log.warning(
            "%d of %d optimizer steps in this run were skipped because a loss or gradient norm was not finite "
            "(optim/skipped_total in summary.json): the run trained on the others only",
            state.skipped_total,
            state.optim_steps,
        )
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
                    "eps (1e-8) underflows to 0: use model_opts.dtype float32 or bfloat16, or a lower optim.lr"
                )


#: torch.multinomial's error on NaN/inf/negative probabilities (HF sampling from non-finite logits)
NONFINITE_SAMPLING = "probability tensor contains"
#: below this temperature, logits / temperature overflow float32 for ordinary logits (|logit| >= ~1e-8)
TINY_TEMPERATURE = 1e-30


def nonfinite_sampling(where: str, cfg: Any, *, temperature: float, temperature_key: str, updated: bool) -> RunFailed:
    """The one-line error for sampling that met non-finite next-token probabilities, to raise in
    place of torch's `probability tensor contains either inf, nan or element < 0`.

    where: "step 3" or "eval after training". cfg: the RunConfig. temperature / temperature_key:
    the sampling temperature in use and its key (sampling.temperature, eval.temperature).
    updated: whether an optimizer step has changed the policy. The likely key: a temperature below
    TINY_TEMPERATURE (the scaled logits overflow), else before any update the model itself, else
    `divergence_hint` (optim.lr / optim.weight_decay)."""
    if temperature < TINY_TEMPERATURE:
        cause = f"{temperature_key} = {temperature:g} (the logits divided by it overflow float32; use 1e-3 or more)"
    elif not updated:
        cause = "the model's own weights (no update has changed them yet): check model and model_opts.dtype"
    else:
        cause = "the previous updates diverged: " + divergence_hint(cfg)
    return RunFailed(
        f"{where}: sampling failed because the policy's next-token probabilities are not finite "
        f"(NaN/inf logits); likely cause: {cause}; the last checkpoint is kept"
    )
