"""Checks and comparisons of whole variants (no model loaded): `check_variant` finds combinations no
single component can reject (`zoo validate`), `diff_variants` lists the resolved settings in which two
variants differ (`zoo diff`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from zoo.config.desugar import kl_parts
from zoo.config.variant import Variant, VariantError, build_components
from zoo.declarations import of as declared
from zoo.fields import declared_reads, unproduced_reads


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


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
    errors, warnings = unproduced_reads(named, {**comps, "kl_reward": parts.reward_estimator})
    rep.errors += [f"{where}: {e}" for e in errors]  # e.g. gae without a critic
    rep.warnings += [f"{where}: {w}" for w in warnings]  # e.g. reinforce_pp without the KL in the reward
    if v.critic_warmup and comps["critic"] is None:
        rep.errors.append(f"{where}: critic_warmup {v.critic_warmup} needs a critic (slots.critic): without one "
                          "nothing trains in those steps")
    if comps["critic"] is not None and not any("values" in declared_reads(c) for _, c in named if c is not comps["critic"]):
        rep.warnings.append(f"{where}: slots.critic is set but no component reads 'values' (advantage {adv.name!r} "
                            "uses none): the critic is not trained")
    group_based = [c.name for c in (adv, comps["normalizer"], comps["objective_norm"]) if declared(c).needs_groups]
    group_based += [c.name for c in comps["filter"] + comps["length"] if declared(c).needs_groups]
    if g < 2 and group_based:
        rep.errors.append(f"{where}: group_size {g} < 2 but {', '.join(group_based)} need groups of several completions")
    if not parts.enabled and (kl.beta != 0 or kl.adaptive is not None):
        rep.errors.append(f"{where}: kl.placement is 'none', so kl.beta / kl.adaptive have no effect: set "
                          "kl.placement to loss or reward to use a KL term, or leave them out")
    if parts.enabled and kl.beta == 0 and kl.adaptive is None:
        rep.warnings.append(f"{where}: kl.placement is {kl.placement!r} with beta 0: the KL has no effect")
    if parts.reward_estimator is not None and declared(adv).level == "sequence":
        rep.notes.append(
            f"{where}: KL in the reward with sequence-level advantage {adv.name!r}: the per-token KL is summed "
            "over each completion and subtracted from its score before the baseline (as RLOO does)"
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
                rep.errors.append(f"{where}: controllers: {c.name!r} sets {target!r}, but slots.loss has no "
                                  f"{target.split('.')[0]!r} term (loss terms: {', '.join(sorted(terms)) or '(none)'})")
    if n_updates == 1 and comps["clip"].name != "none":
        what = declared(comps["clip"]).single_update or "can have no effect"  # e.g. clip_cov: its selection acts
        rep.warnings.append(
            f"{where}: clip {comps['clip'].name!r} {what}: one on-policy update per rollout makes every "
            "ratio 1 (set updates.minibatches or updates.epochs > 1 for the clip to act)"
        )
    return rep


def diff_variants(a: Variant, b: Variant) -> list[tuple[str, Any, Any]]:
    """(key, value in a, value in b) for every resolved setting that differs."""
    fa, fb = _flatten(_comparable(a)), _flatten(_comparable(b))
    keys = sorted(set(fa) | set(fb), key=lambda k: (k.split(".")[0] != "group_size", k))

    def empty_vs_items(k: str) -> bool:  # `filter: []` against `filter.dynamic_sampling...`: the items say it
        return any(f.get(k) == [] and any(x.startswith(k + ".") for x in g) for f, g in ((fa, fb), (fb, fa)))

    return [(k, fa.get(k), fb.get(k)) for k in keys if fa.get(k) != fb.get(k) and not empty_vs_items(k)]


def _comparable(v: Variant) -> dict[str, Any]:
    return {
        "group_size": v.group_size,
        "updates": v.updates.model_dump(),
        **({"critic_warmup": v.critic_warmup} if v.critic_warmup else {}),
        "slots": v.resolved(),
    }


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, val in d.items():
            out.update(_flatten(val, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    if isinstance(d, list):
        if all(isinstance(x, dict) and "name" in x for x in d):
            out = {}
            for x in d:
                params = {k: v for k, v in x.items() if k != "name"}
                out.update(_flatten(params, f"{prefix}{x['name']}.") if params else {f"{prefix}{x['name']}": "on"})
            return out or {prefix.rstrip("."): []}
        return {prefix.rstrip("."): d}
    return {prefix.rstrip("."): d}
