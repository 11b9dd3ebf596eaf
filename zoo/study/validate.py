"""`zoo validate` and `zoo ablate`'s checks of a study before anything runs: every distinct arm
through the same stages `zoo run` uses (zoo.checks: `before_load`, then `after_load` from the
model's config.json and tokenizer, no weights), with messages that name the arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo import checks
from zoo.checks.registry import Report
from zoo.config import variant as V
from zoo.config.run import RunConfig, parse_run_config
from zoo.config.variant import VariantError
from zoo.study.experiment import (
    ABLATION_RUN_KEYS,
    STUDY_KEYS,
    Arm,
    expand_arms,
    load_study,
    read_study_file,
    seed_of,
)
from zoo.study.study_checks import (
    arms_alike,
    duplicate_sweep_arms,
    shared_set_overrides,
    study_term_errors,
)


def variant_context(cfg: RunConfig, v: V.Variant) -> dict[str, Any]:
    """What `check_variant` needs from the run: the group size and updates actually used, max_new_tokens."""
    return {
        "group_size": cfg.budget.group_size or v.group_size,
        "updates": cfg.budget.updates or v.updates,
        "max_new_tokens": cfg.budget.max_new_tokens,
    }


def check_arms(
    arms: list[Arm],
    plugins: list[str] | tuple[str, ...] = (),
    *,
    world_size: int | None = None,
    launched: bool | None = None,
    load_files: bool = True,
    local_memory: bool = True,
) -> Report:
    """Check every distinct arm (seeds sharing a configuration are checked once) with
    `zoo.checks.before_load` and, when it passes and `load_files`, `zoo.checks.check_loadable` (the
    model's config.json and tokenizer; no weights). world_size / launched: the processes the arms
    will run with (default: this process's launcher); local_memory: the arms run on this machine, so
    their rollout is checked against its memory (False for arms sent elsewhere, e.g. Ray tasks).
    Every message starts with `arm NAME: `, or, said once for a study of several distinct arms, with
    `all N arms: ` where every arm has the same message (`fold_shared`)."""
    subs: list[tuple[str, Report]] = []
    seen: dict[str, list[str]] = {}
    for arm in arms:
        seen.setdefault(arm.group, []).append(arm.label)
    firsts = {a.group: a for a in reversed(arms)}
    loaded: dict[str, Report] = {}
    said: set[str] = set()
    for group, labels in seen.items():
        arm = firsts[group]
        who = f"arm {group}" + (f" (seeds {', '.join(str(seed_of(x)) for x in labels)})" if len(labels) > 1 else "")
        cfg = arm.config
        if plugins and not cfg.plugins:  # the study's plugins apply to every arm
            cfg = cfg.model_copy(update={"plugins": list(plugins)})
        sub, v = checks.before_load(cfg, world_size=world_size, launched=launched, origin=arm.origin)
        in_study_terms(arm, sub)
        if sub.ok and load_files:
            key = cfg.model_dump_json(include={"model", "task", "budget", "model_opts", "rewards", "variant", "set"})
            if key not in loaded:
                loaded[key] = checks.check_loadable(cfg, v, memory=local_memory)
            after = loaded[key]
            sub.errors += after.errors
            sub.warnings += after.warnings
            sub.notes += [n for n in after.notes if n not in said]  # e.g. the model's size: once per study
            said.update(after.notes)
        subs.append((who, sub))
    rep = fold_shared(subs, len(arms))
    rep.errors += duplicate_arm_errors(arms)
    return rep


def in_study_terms(arm: Arm, rep: Report) -> None:
    """In place: a study arm's errors about its variant said in the study's terms, first: an unknown
    variant with the file and key it was written at (`unknown_variant`), a `set` key of neither kind with
    the run-config keys a `set` may hold (`unknown_set_keys`), instead of what zoo.checks said about them."""
    found = study_term_errors(arm, ABLATION_RUN_KEYS)
    for said, _ in found:
        rep.errors = [e for e in rep.errors if said not in e]
    rep.errors[:0] = [line for _, line in found]


def duplicate_arm_errors(arms: list[Arm]) -> list[str]:
    """Issue 37 §3: one error per two arms of different names that resolve to the same configuration at
    a seed (`duplicate_sweep_arms`; the same name's sweep points are refused by `expand_arms`), naming
    both, the seeds and the keys that differ without effect (`arms_alike`). Arms that differ only by
    seed are not alike."""
    by_label = {a.label: a for a in arms}
    pairs: dict[tuple[str, str], list[tuple[Arm, Arm]]] = {}
    for a, b in duplicate_sweep_arms(arms, across=True):
        x, y = by_label[a], by_label[b]
        if x.base != y.base:
            pairs.setdefault((x.group, y.group), []).append((x, y))
    return [
        f"arms {ga} and {gb} resolve to the same configuration (seed{'s' * (len(same) > 1)} "
        f"{', '.join(str(x.seed) for x, _ in same)}; "
        f"{arms_alike(*same[0])}): they would train the same run twice; remove one or make them differ"
        for (ga, gb), same in pairs.items()
    ]


def fold_shared(subs: list[tuple[str, Report]], n_arms: int) -> Report:
    """One Report from each distinct arm's (who, Report): a message that every one of several arms
    has (e.g. a bad key all arms share) once as `all {n_arms} arms: message`, first; the others
    under `who: ` as they are."""
    rep = Report()
    for kind in ("errors", "warnings", "notes") if len(subs) > 1 else ():
        first = getattr(subs[0][1], kind)
        shared = [m for m in dict.fromkeys(first) if all(m in getattr(s, kind) for _, s in subs[1:])]
        getattr(rep, kind).extend(f"all {n_arms} arms: {m}" for m in shared)
        for _, sub in subs:
            setattr(sub, kind, [m for m in getattr(sub, kind) if m not in shared])
    for who, sub in subs:
        rep.extend(sub, f"{who}: ")
    return rep


def run_checks(cfg: RunConfig, v: V.Variant | None = None) -> list[str]:
    """The errors `zoo run` would stop `cfg` with before loading a model (`zoo.checks.before_load`).
    `v` is accepted for older callers and not used: the checks build the effective variant."""
    return checks.before_load(cfg)[0].errors


def check_study_file(path: str | Path, *, world_size: int | None = None, launched: bool | None = None) -> Report:
    """`zoo validate STUDY.yaml`: schema, arms and every arm's checks; problems go into the Report.
    world_size / launched as in `check_arms` (`zoo validate --nproc N`)."""
    rep = Report()
    try:
        data = read_study_file(Path(path))
        if any(k in data for k in STUDY_KEYS):
            st = load_study(path)
            arms, plugins = expand_arms(st), st.plugins
        else:  # a plain run file (e.g. an arm's written config.yaml): one arm
            cfg = parse_run_config(data, str(path))
            cfg._source = str(path)  # a run file: its errors lead with the file and the user's key
            arms, plugins = [Arm(cfg.name, cfg.arm or cfg.name, cfg.seed, {}, cfg, dict(cfg.set))], cfg.plugins
    except VariantError as e:
        rep.errors.append(str(e))
        return rep
    rep.extend(check_arms(arms, plugins, world_size=world_size, launched=launched))
    if any(k in data for k in STUDY_KEYS):
        rep.warnings += shared_set_overrides(st)
    if rep.ok:
        rep.notes.append(f"{path}: {len(arms)} arm(s): {', '.join(a.label for a in arms)}")
    return rep
