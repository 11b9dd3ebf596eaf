"""The variant before anything loads: the run's plugins import, its effective variant builds (the run's
`set:` overrides and the budget's group_size / updates / critic_warmup applied, as the step uses it) and
its slots combine (`check_variant`: combinations no single component can reject); its rewards and gold
rewards resolve, and what its components read from the rewards will exist (`check_reward_reads`).

What the components read from the rewards: the per-row metric a sampling filter or a length reward
names (`filter: dynamic_sampling` on `accuracy`, `length: kimi_length` on `accuracy`: declared
`reads_metric`), and the reward column a loss term reads (`nll_positive`'s `column`: declared
`reads_column`). Without these checks, such mistakes surface only at the first step, after the models
loaded."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from zoo.checks.registry import BeforeLoad, Report, check
from zoo.components.filter import step_metric_kinds
from zoo.config.desugar import kl_parts
from zoo.config.variant import Variant, VariantError, build_components
from zoo.core import stages
from zoo.core.declarations import of as declared
from zoo.core.fields import declared_reads, unproduced_reads
from zoo.core.registry import Component, ComponentError, build


# ---------------------------------------------------------------- the variant's slots combine
def check_variant(v: Variant, context: Mapping[str, Any] | None = None) -> Report:
    """Combination checks that no single component can make (before any model is loaded)."""
    rep = Report()
    try:
        comps = build_components(v, context)
    except VariantError as e:
        rep.errors.append(str(e))
        return rep
    where = v.path or v.name
    kl = v.slots.kl_spec()
    parts = kl_parts(kl)
    named = [(slot, c) for slot, x in comps.items() for c in (x if isinstance(x, list) else [x]) if c is not None]
    _reads(where, comps, named, parts, rep)
    _critic(where, v, comps, named, rep)
    _groups(where, comps, int((context or {}).get("group_size", v.group_size)), rep)
    _kl(where, kl, parts, comps["advantage"], rep)
    _rules(where, comps, rep)
    _controllers(where, comps, parts, rep)
    upd = (context or {}).get("updates", v.updates)
    _single_update(where, comps["clip"], upd.epochs * upd.minibatches, rep)
    return rep


def _reads(where: str, comps: dict[str, Any], named: list[tuple[str, Any]], parts: Any, rep: Report) -> None:
    """Every field a component or an active plugin stage reads is produced (zoo/core/fields.py), and
    produced before it is read (zoo/core/stages.py)."""
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


def _critic(where: str, v: Variant, comps: dict[str, Any], named: list[tuple[str, Any]], rep: Report) -> None:
    """A critic warm-up needs a critic; a critic whose values no component reads is not trained."""
    critic = comps["critic"]
    if v.critic_warmup and critic is None:
        rep.errors.append(
            f"{where}: critic_warmup {v.critic_warmup} needs a critic (slots.critic): without one "
            "nothing trains in those steps"
        )
    if critic is not None and not any("values" in declared_reads(c) for _, c in named if c is not critic):
        rep.warnings.append(
            f"{where}: slots.critic is set but no component reads 'values' (advantage {comps['advantage'].name!r} "
            "uses none): the critic is not trained"
        )


def _groups(where: str, comps: dict[str, Any], g: int, rep: Report) -> None:
    """Group-based components need groups of several completions (group_size `g` >= 2)."""
    group_based = [
        c.name for c in (comps["advantage"], comps["normalizer"], comps["objective_norm"]) if declared(c).needs_groups
    ]
    group_based += [c.name for c in comps["filter"] + comps["length"] if declared(c).needs_groups]
    if g < 2 and group_based:
        rep.errors.append(
            f"{where}: group_size {g} < 2 but {', '.join(group_based)} need groups of several completions"
        )


def _kl(where: str, kl: Any, parts: Any, adv: Any, rep: Report) -> None:
    """kl.beta / kl.adaptive without a KL term, a KL term of no effect, and the KL in the reward with a
    sequence-level estimator (a note)."""
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


def _rules(where: str, comps: dict[str, Any], rep: Report) -> None:
    """Warnings where the clip rule or the normalizer undoes what the advantage estimator gives."""
    adv, clip = comps["advantage"], comps["clip"]
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


def _controllers(where: str, comps: dict[str, Any], parts: Any, rep: Report) -> None:
    """A controller sets a term's hyperparameter by name: that term must be there."""
    terms = {t.name for t in comps["loss"]} | ({"kl"} if parts.enabled else set())
    for c in comps["controllers"]:
        for target in declared(c).sets:
            if target.split(".")[0] not in terms:
                rep.errors.append(
                    f"{where}: controllers: {c.name!r} sets {target!r}, but slots.loss has no "
                    f"{target.split('.')[0]!r} term (loss terms: {', '.join(sorted(terms)) or '(none)'})"
                )


def _single_update(where: str, clip: Any, n_updates: int, rep: Report) -> None:
    """A clip rule with one on-policy update per rollout: every ratio is 1."""
    if n_updates == 1 and clip.name != "none":
        what = declared(clip).single_update or "can have no effect"  # e.g. clip_cov: its selection acts
        rep.warnings.append(
            f"{where}: clip {clip.name!r} {what}: one on-policy update per rollout makes every "
            "ratio 1 (set updates.minibatches or updates.epochs > 1 for the clip to act)"
        )


# ---------------------------------------------------------------- the run's plugins and effective variant
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
    if s.variant.trains == "dual_encoder":  # grpo_tta, rlcf: a dual encoder's update (zoo.step.tta)
        rep.errors.append(not_for_zoo_run(s.variant, s.cfg))
        s.stop = True
        return
    sub = check_variant(s.variant, s.context())
    rep.errors += [_users_terms(m, s) for m in sub.errors]
    rep.warnings += sub.warnings
    rep.notes += sub.notes
    if sub.ok:
        s.components = build_components(s.variant, s.context())


def not_for_zoo_run(v: Variant, cfg: Any) -> str:
    """The one line refusing a `trains: dual_encoder` variant (grpo_tta, rlcf) in a `zoo run` file: it
    updates a dual encoder on unlabelled images, which only `zoo tta` runs (zoo.cli.tta)."""
    from zoo.config.user_keys import source_of

    where = f"{source_of(cfg)}: " if source_of(cfg) else ""
    return (
        f"{where}key 'variant': {v.name!r} ({v.path or 'registry'}) is a `zoo tta` variant (trains: dual_encoder, "
        f"test-time adaptation of a CLIP-style dual encoder), not one `zoo run` can train: put `variant: {v.name}` "
        "under a `zoo tta` file's `tta:` and run `zoo tta FILE` (examples/tta_grpo.yaml, docs/reference/grpo-tta.md)"
    )


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


# ---------------------------------------------------------------- the rewards, and what the components read from them
def check_reward_reads(
    slots: Any, rewards: Sequence[Component], context: Mapping[str, Any] | None = None
) -> tuple[list[str], list[str]]:
    """(errors, warnings) for `slots` (a variant's slots: `filter`, `length`, `loss` lists of specs)
    against the run's built reward components, in the order of the run file's `rewards:`.

    - A filter or length component declaring `reads_metric` names a metric
      (`zoo.step.scoring.per_row_metrics`): an error when no reward will produce it (`accuracy`
      needs a reward registered with `accuracy=True`, e.g. `correctness`); for a filter, a warning
      when the metric is continuous (an equality filter then keeps nearly every group); for a length
      reward, a warning when it is not a 0/1 score (kimi_length reads 1.0 as correct).
    - A loss term declaring `reads_column` reads reward column `column` (0-based): an error when the
      run has no such column, a warning when that reward does not judge correctness.
    Raises ComponentError for a spec that does not build (check_variant reports that first)."""
    kinds = step_metric_kinds(rewards)
    errors: list[str] = []
    warnings: list[str] = []
    for slot in ("filter", "length"):
        for comp in (build(slot, s, context) for s in getattr(slots, slot, None) or []):
            if not comp.decl.reads_metric:
                continue
            metric = comp.resolved()["metric"]
            if metric not in kinds:
                why = "it needs a `correctness` reward" if metric == "accuracy" else "no reward produces it"
                errors.append(
                    f"{slot} {comp.name}: metric {metric!r} will not exist ({why}); the step's metrics "
                    f"are {', '.join(sorted(kinds))}"
                )
            elif slot == "filter" and metric == "reward" and _shaping(slots, context):
                warnings.append(
                    f"filter {comp.name}: metric 'reward' is the score after length shaping "
                    f"({', '.join(_shaping(slots, context))} adds a column to it), so groups whose answers are all "
                    "right or all wrong but differ in length are kept with a shaping-only advantage; DAPO "
                    "filters on accuracy (metric: accuracy, with a correctness reward)"
                )
            elif slot == "filter" and kinds[metric] is False:
                warnings.append(
                    f"filter {comp.name}: metric {metric!r} is continuous, so its values rarely tie "
                    "within a group and the filter keeps nearly every group (it drops only groups whose "
                    "values are all equal); DAPO filters on accuracy"
                )
            elif slot == "length" and metric != "accuracy" and kinds[metric] is not True:
                warnings.append(
                    f"length {comp.name}: metric {metric!r} is not a 0/1 correctness score; a row counts "
                    "as correct when it is 1.0, so a continuous metric makes nearly every row incorrect "
                    "(Kimi k1.5 uses accuracy)"
                )
    for comp in (build("loss", s, context) for s in getattr(slots, "loss", None) or []):
        if comp.decl.reads_column:
            col, n = comp.resolved()["column"], len(rewards)
            if col >= n:
                errors.append(
                    f"loss {comp.name}: column {col} does not exist; the run has {n} reward column(s), "
                    f"numbered 0 .. {n - 1} in the order of the run file's `rewards:`"
                )
            elif not declared(rewards[col]).accuracy:
                judges = [i for i, r in enumerate(rewards) if declared(r).accuracy]
                hint = f"set column: {judges[0]} ({rewards[judges[0]].name})" if judges else "add a correctness reward"
                warnings.append(
                    f"loss {comp.name}: column {col} is {rewards[col].name!r}, not a correctness reward, "
                    f"yet a row counts as correct when its score is >= the threshold: {hint}"
                )
    return errors, warnings


@check("rewards", "before_load")
def rewards(s: BeforeLoad, rep: Report) -> None:
    """`rewards:` and `gold:` resolve (registered names, parameters, plugin modules; a reward model
    directory holds a checkpoint); the built rewards go to `s.rewards`."""
    from zoo.rewards.compute import resolve_rewards

    try:
        s.rewards = [c for c, _ in resolve_rewards(s.cfg.rewards, s.cfg.plugins)]
    except ValueError as e:
        rep.errors.append(f"rewards: {_unprefixed(e)}")
    if s.cfg.gold:
        try:
            resolve_rewards(s.cfg.gold, s.cfg.plugins)
        except ValueError as e:
            rep.errors.append(f"gold: {_unprefixed(e)}")


def _unprefixed(e: ValueError) -> str:
    """`resolve_rewards`' message without its own `rewards: ` lead: the check names the key (`rewards`
    or `gold`) once."""
    return str(e).removeprefix("rewards: ")


@check("reward_reads", "before_load")
def reward_reads(s: BeforeLoad, rep: Report) -> None:
    """What the variant's filters, length rewards and loss terms read from the rewards exists
    (`check_reward_reads`); skipped when the variant or the rewards did not build."""
    if s.components is None or s.rewards is None:
        return
    errors, warnings = check_reward_reads(s.variant.slots, s.rewards, s.context())
    rep.errors += errors
    rep.warnings += warnings


def _shaping(slots: Any, context: Mapping[str, Any] | None) -> list[str]:
    """The variant's length components that add a column to the score (all but `overlong_filter`,
    which only drops rows)."""
    return [
        build("length", sp, context).name
        for sp in getattr(slots, "length", None) or []
        if build("length", sp, context).name != "overlong_filter"
    ]
