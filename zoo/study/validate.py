"""`zoo validate` and `zoo ablate`'s checks of a study before anything runs: every arm's variant with
its overrides and budget, its rewards and filters, and what `zoo run` would reject (no model loaded)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zoo.config import variant as V
from zoo.config.run import RunConfig, effective_variant, parse_run_config
from zoo.config.run_checks import run_warnings
from zoo.study.experiment import STUDY_KEYS, Arm, expand_arms, load_study, read_study_file, seed_of
from zoo.config.checks import Report, check_variant
from zoo.config.variant import VariantError


def variant_context(cfg: RunConfig, v: V.Variant) -> dict[str, Any]:
    """What `check_variant` needs from the run: the group size and updates actually used, max_new_tokens."""
    return {"group_size": cfg.budget.group_size or v.group_size, "updates": cfg.budget.updates or v.updates,
            "max_new_tokens": cfg.budget.max_new_tokens}


def check_arms(arms: list[Arm], plugins: list[str] | tuple[str, ...] = ()) -> Report:
    """Load and check every distinct arm's variant with its overrides and budget (no model loaded).
    Messages name the arms (seeds sharing a configuration are checked once)."""
    from zoo import registry

    rep = Report()
    try:
        registry.load_plugins(list(plugins))
    except registry.ComponentError as e:
        rep.errors.append(f"plugins: {e}")
        return rep
    seen: dict[str, list[str]] = {}
    for arm in arms:
        seen.setdefault(arm.group, []).append(arm.label)
    firsts = {a.group: a for a in reversed(arms)}
    for group, labels in seen.items():
        arm = firsts[group]
        who = f"arm {group}" + (f" (seeds {', '.join(str(seed_of(x)) for x in labels)})" if len(labels) > 1 else "")
        try:
            v = effective_variant(arm.config)  # the budget's group_size / updates / critic_warmup applied, as zoo run does
            sub = check_variant(v, variant_context(arm.config, v))
        except VariantError as e:
            rep.errors.append(f"{who}: {_override_origin(str(e), arm)}")
            continue
        rep.errors += [f"{who}: {_override_origin(m, arm)}" for m in sub.errors]
        rep.warnings += [f"{who}: {m}" for m in sub.warnings]
        rep.notes += [f"{who}: {m}" for m in sub.notes]
        rep.errors += [f"{who}: {m}" for m in run_checks(arm.config, v)]
        errors, warnings = _filter_checks(arm.config, v)
        rep.errors += [f"{who}: {m}" for m in errors]
        rep.warnings += [f"{who}: {m}" for m in warnings]
        rep.warnings += [f"{who}: {m}" for m in run_warnings(arm.config, v)]
    return rep


def _filter_checks(cfg: RunConfig, v: V.Variant) -> tuple[list[str], list[str]]:
    """What the variant's components read from the rewards (a filter's or length reward's metric, a loss
    term's reward column) against the arm's rewards (zoo.components.reward_reads); nothing when the
    rewards do not resolve (run_checks reports that)."""
    from zoo.components.reward_reads import check_reward_reads
    from zoo.rewards.compute import resolve_rewards

    try:
        rewards = [c for c, _ in resolve_rewards(cfg.rewards, cfg.plugins)]
        return check_reward_reads(v.slots, rewards, {"max_new_tokens": cfg.budget.max_new_tokens})
    except ValueError:  # run_checks / check_variant report it
        return [], []


def _override_origin(msg: str, arm: Arm) -> str:
    """An override error names the registry file it was applied to; say where the override was written."""
    where = arm.origin
    out, n = re.subn(r"^\S+ \(overrides\): ", f"{where}: ", msg, count=1)
    if n == 0 and arm.config.set:  # raised while building the overridden variant: the user's key first
        sets = ", ".join(f"{k}={v}" for k, v in arm.config.set.items())
        out = f"{where}: {sets}: {msg}"
    return out


def run_checks(cfg: RunConfig, v: V.Variant) -> list[str]:
    """What `zoo run` would reject before loading a model: reward names, the generator
    (`sampling.backend`), minibatches vs completions per step, a local model path that does not exist,
    `critic.init: reward_model` without a reward model or with one whose tokenizer differs from the
    policy's (the tokenizers load; no model)."""
    from zoo.models import EMBEDDED_ALIASES
    from zoo.rewards.compute import resolve_rewards

    errors = []
    try:
        resolve_rewards(cfg.rewards, cfg.plugins)
    except ValueError as e:
        errors.append(f"rewards: {e}")
    if cfg.gold:
        try:
            resolve_rewards(cfg.gold, cfg.plugins)
        except ValueError as e:
            errors.append(f"gold: {e}")
    from zoo.backends.generate.backend import backend_error

    gen_error = backend_error(cfg.sampling.backend)
    if gen_error:
        errors.append(gen_error)
    from zoo.envs.base import env_errors

    errors += env_errors(cfg.task)  # task.env: the environment's name and keys
    g = cfg.budget.group_size or v.group_size
    upd = cfg.budget.updates or v.updates
    n = cfg.budget.prompts_per_step * g
    if upd.minibatches > n:
        errors.append(f"budget: updates.minibatches {upd.minibatches} > {n} completions per step "
                      "(prompts_per_step x group_size)")
    m = str(cfg.model)
    if m not in EMBEDDED_ALIASES and (m.startswith((".", "/", "~")) and not Path(m).expanduser().exists()):
        errors.append(f"model: local path {m!r} does not exist")
    from zoo.models.critic_init import critic_init_errors

    errors += critic_init_errors(cfg, v)  # critic.init: reward_model: a reward model sharing the policy's tokenizer
    return errors


def check_study_file(path: str | Path) -> Report:
    """`zoo validate STUDY.yaml`: schema, arms and every arm's variant; problems go into the Report."""
    rep = Report()
    try:
        data = read_study_file(Path(path))
        if any(k in data for k in STUDY_KEYS):
            st = load_study(path)
            arms, plugins = expand_arms(st), st.plugins
        else:  # a plain run file (e.g. an arm's written config.yaml): one arm
            cfg = parse_run_config(data, str(path))
            arms, plugins = [Arm(cfg.name, cfg.arm or cfg.name, cfg.seed, {}, cfg, dict(cfg.set))], cfg.plugins
    except VariantError as e:
        rep.errors.append(str(e))
        return rep
    sub = check_arms(arms, plugins)
    rep.errors += sub.errors
    rep.warnings += sub.warnings
    rep.notes += sub.notes
    if rep.ok:
        rep.notes.append(f"{path}: {len(arms)} arm(s): {', '.join(a.label for a in arms)}")
    return rep
