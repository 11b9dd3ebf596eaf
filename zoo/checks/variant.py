"""The variant and its slots: combinations no single component can reject (`check_variant`), and the
`before_load` checks that load the run's plugins and build its effective variant (the run's `set:`
overrides and the budget's group_size / updates / critic_warmup applied, as the step uses it)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad
from zoo.config.desugar import kl_parts
from zoo.config.variant import Variant, VariantError, build_components
from zoo.core import stages
from zoo.core.declarations import of as declared
from zoo.core.fields import declared_reads, unproduced_reads
from zoo.core.registry import ComponentError


def check_variant(v: Variant, context: Mapping[str, Any] | None = None) -> Report:
    """Combination checks that no single component can make (before any model is loaded)."""
    rep = Report()
    try:
        comps = build_components(v, context)
    except VariantError as e:
        rep.errors.append(str(e))
        return rep
    where = v.path or v.name
    adv = comps["advantage"]
    kl = v.slots.kl_spec()
    g = int((context or {}).get("group_size", v.group_size))
    upd = (context or {}).get("updates", v.updates)
    n_updates = upd.epochs * upd.minibatches
    parts = kl_parts(kl)
    named = [(slot, c) for slot, x in comps.items() for c in (x if isinstance(x, list) else [x]) if c is not None]
    try:  # plugin stages that write a field some component reads (zoo/core/stages.py)
        active = stages.active(c for _, c in named)
    except ComponentError as e:
        rep.errors.append(f"{where}: {e}")
        active = []
    written = {f: s.name for s in active for f in s.decl.writes}
    errors, warnings = unproduced_reads(
        named + [("stage", s) for s in active], {**comps, "kl_reward": parts.reward_estimator}, written
    )
    errors += stages.order_errors(named, active)  # every read made before it is read
    rep.errors += [f"{where}: {e}" for e in errors]  # e.g. gae without a critic
    rep.warnings += [f"{where}: {w}" for w in warnings]  # e.g. reinforce_pp without the KL in the reward
    if v.critic_warmup and comps["critic"] is None:
        rep.errors.append(
            f"{where}: critic_warmup {v.critic_warmup} needs a critic (slots.critic): without one "
            "nothing trains in those steps"
        )
    if comps["critic"] is not None and not any(
        "values" in declared_reads(c) for _, c in named if c is not comps["critic"]
    ):
        rep.warnings.append(
            f"{where}: slots.critic is set but no component reads 'values' (advantage {adv.name!r} "
            "uses none): the critic is not trained"
        )
    group_based = [c.name for c in (adv, comps["normalizer"], comps["objective_norm"]) if declared(c).needs_groups]
    group_based += [c.name for c in comps["filter"] + comps["length"] if declared(c).needs_groups]
    if g < 2 and group_based:
        rep.errors.append(
            f"{where}: group_size {g} < 2 but {', '.join(group_based)} need groups of several completions"
        )
    if not parts.enabled and (kl.beta != 0 or kl.adaptive is not None):
        rep.errors.append(
            f"{where}: kl.placement is 'none', so kl.beta / kl.adaptive have no effect: set "
            "kl.placement to loss or reward to use a KL term, or leave them out"
        )
    if parts.enabled and kl.beta == 0 and kl.adaptive is None:
        rep.warnings.append(f"{where}: kl.placement is {kl.placement!r} with beta 0: the KL has no effect")
    if parts.reward_estimator is not None and declared(adv).level == "sequence":
        rep.notes.append(
            f"{where}: KL in the reward with sequence-level advantage {adv.name!r}: the per-token KL is summed "
            "over each completion and subtracted from its score before the baseline (as RLOO does)"
        )
    clip = comps["clip"]
    if clip.name == "gspo" and declared(adv).level == "token" and clip.resolved().get("advantage") == "row_mean":
        rep.warnings.append(
            f"{where}: clip 'gspo' averages each row's advantages (advantage: row_mean) but {adv.name!r} gives "
            "one per token: verl and TRL keep each token's own (set clip advantage: token for their rule)"
        )
    norm = comps["normalizer"].resolved()
    if declared(adv).needs_groups and norm.get("shift_mean") is True and norm.get("level") == "token":
        rep.warnings.append(
            f"{where}: normalizer {comps['normalizer'].name!r} subtracts a token-level batch mean after group-baseline "
            f"advantage {adv.name!r}: with unequal completion lengths a group whose completions all scored alike gets "
            "a non-zero advantage (set normalizer level: sequence, one value per completion, as GDPO does)"
        )
    terms = {t.name for t in comps["loss"]} | ({"kl"} if parts.enabled else set())
    for c in comps["controllers"]:  # a controller sets a term's hyperparameter by name: that term must be there
        for target in declared(c).sets:
            if target.split(".")[0] not in terms:
                rep.errors.append(
                    f"{where}: controllers: {c.name!r} sets {target!r}, but slots.loss has no "
                    f"{target.split('.')[0]!r} term (loss terms: {', '.join(sorted(terms)) or '(none)'})"
                )
    if n_updates == 1 and comps["clip"].name != "none":
        what = declared(comps["clip"]).single_update or "can have no effect"  # e.g. clip_cov: its selection acts
        rep.warnings.append(
            f"{where}: clip {comps['clip'].name!r} {what}: one on-policy update per rollout makes every "
            "ratio 1 (set updates.minibatches or updates.epochs > 1 for the clip to act)"
        )
    return rep


@check("plugins", "before_load")
def plugins(s: BeforeLoad, rep: Report) -> None:
    """The run's `plugins:` import (their components register); nothing else is checked when not."""
    from zoo.core import registry

    try:
        registry.load_plugins(list(s.cfg.plugins))
    except (registry.ComponentError, VariantError) as e:
        rep.errors.append(f"plugins: {e}")
        s.stop = True


@check("variant", "before_load")
def variant(s: BeforeLoad, rep: Report) -> None:
    """The effective variant builds and its slots combine (`check_variant`); an override's error names
    where the override was written (`s.origin`) and the user's key first."""
    from zoo.config.run import effective_variant

    try:
        s.variant = effective_variant(s.cfg)
    except VariantError as e:
        rep.errors.append(_users_terms(str(e), s))
        return
    sub = check_variant(s.variant, s.context())
    rep.errors += [_users_terms(m, s) for m in sub.errors]
    rep.warnings += sub.warnings
    rep.notes += sub.notes
    if sub.ok:
        s.components = build_components(s.variant, s.context())


def _users_terms(msg: str, s: BeforeLoad) -> str:
    """A run read from a file: its file and the user's key first (`run.yaml: set.kl.beta = -1: must be
    >= 0 (applied to registry/grpo.yaml, ...)`, zoo.config.user_keys); a study's arm: `override_origin`."""
    from zoo.config.user_keys import source_of, user_key_first

    if source_of(s.cfg):
        return user_key_first(msg, s.cfg)
    return override_origin(msg, s.origin, s.cfg.set)


def override_origin(msg: str, origin: str, sets: Mapping[str, Any]) -> str:
    """An override error names the registry file it was applied to ("grpo.yaml (overrides): ..."):
    say where the override was written (`origin`: `set`, `ablations.X.set`); an error raised while
    building the overridden variant starts with the user's keys (`set: clip.eps_hgh=0.3: ...`)."""
    out, n = re.subn(r"^\S+ \(overrides\): ", f"{origin}: ", msg, count=1)
    if n == 0 and sets:
        out = f"{origin}: {', '.join(f'{k}={v}' for k, v in sets.items())}: {msg}"
    return out
