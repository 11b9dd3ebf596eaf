"""Run-config checks that need the variant but no model: settings that would be silently ignored.

Called by the `run_warnings` check of zoo.checks (`zoo run`, `zoo validate`, `zoo ablate`, `zoo bench`);
each returns warnings (the run still starts), one line each, naming the keys.
"""

from __future__ import annotations

from typing import Any

from zoo.config.desugar import kl_parts
from zoo.config.run import RunConfig
from zoo.config.variant import Variant

BUDGET_WINS = ("group_size", "updates", "critic_warmup")  # variant fields the run's budget replaces when set


def shadowed_overrides(cfg: RunConfig) -> list[str]:
    """Variant overrides (`set: {group_size: 3}`, `set: {updates.minibatches: 2}`) that the budget
    replaces (`budget.group_size`, `budget.updates` win over the variant), one warning each."""
    out = []
    for key, value in cfg.set.items():
        head = str(key).split(".")[0]
        if head not in BUDGET_WINS:
            continue
        budget = getattr(cfg.budget, head)
        if budget is None:
            continue
        shown = budget.model_dump() if hasattr(budget, "model_dump") else budget
        out.append(
            f"set.{key} = {value} is ignored: budget.{head} = {shown} wins over the variant; "
            f"set budget.{key} instead (or remove budget.{head})"
        )
    return out


def ref_reset_unused(cfg: RunConfig, v: Variant) -> list[str]:
    """`ref_reset_every` with a variant that has no KL to the reference (`kl: none`): nothing to reset."""
    if cfg.ref_reset_every and not kl_parts(v.slots.kl_spec()).enabled:
        return [
            f"ref_reset_every = {cfg.ref_reset_every} has no effect: variant {v.name!r} has kl: none, so no "
            "reference model is kept (set slots.kl to use one, or remove ref_reset_every)"
        ]
    return []


def warmup_covers_run(cfg: RunConfig, v: Variant) -> list[str]:
    """A value-pretraining warm-up (`critic_warmup`) as long as the run: the policy never moves."""
    if v.critic_warmup and v.critic_warmup >= cfg.budget.steps:
        return [
            f"critic_warmup = {v.critic_warmup} >= budget.steps = {cfg.budget.steps}: only the critic trains, the "
            "policy never moves (set budget.critic_warmup lower, or budget.steps higher)"
        ]
    return []


#: a run of more rollout steps than this is warned about (a long real run has thousands)
STEPS_WARN = 1_000_000


def unbounded_steps(cfg: RunConfig) -> list[str]:
    """`budget.steps` above STEPS_WARN: a run that would not end in any useful time."""
    if cfg.budget.steps <= STEPS_WARN:
        return []
    return [
        f"budget.steps = {cfg.budget.steps:.3g} is more than {STEPS_WARN} rollout steps: the run would not end in "
        "any useful time (it can be stopped with Ctrl-C and resumes from its last checkpoint); lower budget.steps"
    ]


def run_warnings(cfg: RunConfig, v: Variant) -> list[str]:
    """Every warning of this module for one run config and its (overridden) variant, and a reward model
    that is not built yet (zoo.rewards.reward_model.missing_models)."""
    from zoo.rewards.reward_model import missing_models

    return (
        shadowed_overrides(cfg)
        + ref_reset_unused(cfg, v)
        + warmup_covers_run(cfg, v)
        + unbounded_steps(cfg)
        + missing_models(list(cfg.rewards) + list(cfg.gold))
    )


def coerce_numeric(value: Any) -> Any:
    """A numeric string as the float YAML 1.2 would read (`"1e-3"` -> 0.001), recursively in lists and
    dicts; anything else unchanged (bools stay bools)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, list):
        return [coerce_numeric(x) for x in value]
    if isinstance(value, dict):
        return {k: coerce_numeric(x) for k, x in value.items()}
    return value
