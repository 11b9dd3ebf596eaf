"""Studies (`experiments/*.yaml`): arms = (variant or ablation) x sweep points x seeds; run, resume, shard.

A study file holds the RunConfig keys (model, task, rewards, budget, optim, eval, tracking, ...) as
defaults shared by every arm, plus:

    variants: [ppo, grpo, dapo]                      # registry names (or variant files)
    ablations: {dapo-no-clip-higher: {variant: dapo, set: {clip: ppo}}}
    seeds: [0, 1]                                    # default: [seed] (0)
    sweep: {clip.eps_high: [0.24, 0.28], optim.lr: [1e-5, 2e-5]}   # grid, applied to every arm
    name: my_study                                   # default: the file name
    output_dir: runs/my_study                        # default: runs/<name>

A dotted key whose first part is a variant slot (`clip.eps_high`, `loss.entropy_bonus.coef`) goes into the
arm's `set` (variant overrides); `group_size` and `updates.*` go to `budget.*` (the budget wins over
the variant); any other key (`optim.lr`, `budget.steps`) goes into the run config. A study-level `set` applies to every arm;
an ablation's `set` and then the sweep point override it.

Arm label: `<variant or ablation>[-<sweepkey>=<v>...]-s<seed>`; each arm runs in
`<output_dir>/<label>/` with `name = label`, `study = name`, `arm = label without -s<seed>`.
"""
from __future__ import annotations

import copy
import itertools
import json
import os
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml
from pydantic import Field, ValidationError

from zoo.config import variant as V
from zoo.config.run import RunConfig, parse_run_config, set_dotted
from zoo.config.overrides import OverrideError, apply_dotted, did_you_mean
from zoo.config.run_checks import run_warnings
from zoo.config.schema import Strict, format_validation
from zoo.study_checks import PER_ARM_KEYS, duplicate_sweep_arms, foreign_arm_dir
from zoo.config.checks import Report, check_variant
from zoo.config.variant import VariantError, read_yaml_mapping

STUDY_KEYS = ("variants", "ablations", "seeds", "sweep")
_SAFE = re.compile(r"[^A-Za-z0-9._=+,-]+")
_SEED_SUFFIX = re.compile(r"-s(-?\d+)$")


class Ablation(Strict):
    """One named ablation arm: a variant with dotted overrides (`{clip: ppo, clip.eps_high: 0.3}`)."""

    variant: str
    set: dict[str, Any] = Field(default_factory=dict)


class Study(RunConfig):
    """A validated study file: shared RunConfig defaults + the arms' definition."""

    name: str | None = None  # type: ignore[assignment]
    variants: list[str] = Field(default_factory=list)
    ablations: dict[str, Ablation] = Field(default_factory=dict)
    seeds: list[int] | None = None
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    path: str | None = Field(None, exclude=True)

    def study_dir(self) -> Path:
        """Where the arms, study.json and report.md go (`output_dir`, default runs/<name>)."""
        return Path(self.output_dir or Path("runs") / str(self.name))


@dataclass
class Arm:
    """One run of a study. label: the folder name; base: the variant or ablation name;
    sweep: this arm's sweep point; config: its complete RunConfig."""

    label: str
    base: str
    seed: int
    sweep: dict[str, Any]
    config: RunConfig
    overrides: dict[str, Any] = field(default_factory=dict)
    origin: str = "set"  # where `overrides` were written, for error messages

    @property
    def group(self) -> str:
        """The label without the seed: arms that differ only by seed share it (the report averages them)."""
        return _SEED_SUFFIX.sub("", self.label)


# --------------------------------------------------------------------------- load


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise VariantError(f"{path}: file not found")
    return read_yaml_mapping(path)


def parse_study(data: Mapping[str, Any], where: str, default_name: str = "study") -> Study:
    """Validate a study dict. Raises VariantError naming `where` and the key."""
    for k in ("study", "arm"):
        if k in data:
            raise VariantError(f"{where}: key {k!r} is set by `zoo ablate` for each arm; remove it")
    try:
        st = Study.model_validate(dict(data))
    except ValidationError as e:
        raise VariantError(format_validation(e, where, Study)) from None
    st.path = where
    if not st.name:
        st.name = default_name
    _check_structure(st, where, explicit_variant="variant" in data)
    return st


def _check_structure(st: Study, where: str, explicit_variant: bool) -> None:
    """Checks no field can make alone: arms exist, names unique and usable as folder names."""
    if not st.variants and not st.ablations:
        if not explicit_variant:
            raise VariantError(f"{where}: no arms: add `variants: [grpo, ...]` and/or `ablations: {{name: {{variant: ..., set: ...}}}}`")
        st.variants = [st.variant]
    elif explicit_variant:
        raise VariantError(f"{where}: key 'variant': a study's arms come from `variants` and `ablations`; "
                           f"`variant: {st.variant}` would be ignored (add it to `variants` instead)")
    dup = sorted({v for v in st.variants if st.variants.count(v) > 1})
    if dup:
        raise VariantError(f"{where}: key 'variants': listed twice: {', '.join(dup)}")
    clash = sorted(set(st.ablations) & {_base_name(v) for v in st.variants})
    if clash:
        raise VariantError(f"{where}: key 'ablations': {', '.join(clash)} is also a variant arm; rename the ablation")
    for name in st.ablations:
        if not name or _SAFE.sub("_", name) != name or name in (".", ".."):
            raise VariantError(f"{where}: key 'ablations.{name}': not usable as a folder name (letters, digits and . _ - = + , only)")
    if not st.name or _SAFE.sub("_", str(st.name)) != str(st.name) or str(st.name) in (".", ".."):
        raise VariantError(f"{where}: key 'name': {st.name!r} names the study folder runs/<name>: use letters, "
                           "digits and . _ - = + , only (not '.' or '..')")
    if st.seeds is None:
        st.seeds = [st.seed]
    if not st.seeds or len(set(st.seeds)) != len(st.seeds):
        raise VariantError(f"{where}: key 'seeds': need at least one seed and no repeats, got {st.seeds}")
    for key, values in st.sweep.items():
        if not values:
            raise VariantError(f"{where}: key 'sweep.{key}': needs at least one value")
        route_key(key, f"{where}: key 'sweep.{key}'")


def load_study(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Study:
    """Read and validate a study file (see the module doc), with dotted `--set` overrides applied to
    the shared run keys (`budget.steps=2`, `optim.lr=1e-4`, `set.clip.eps_high=0.3`, `variants=[grpo]`).
    Raises VariantError naming file and key."""
    p = Path(path)
    data = _read(p)
    if overrides:
        data = _apply_study_overrides(data, overrides, str(p))
    return parse_study(data, str(p), default_name=p.stem)


def _apply_study_overrides(data: dict[str, Any], overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The study's own keys (`variants`, `ablations.x.set.clip=ppo`, `sweep.optim.lr=[..]`) here; every
    other key as a run-file override (`zoo.config.run.set_dotted`)."""
    study_keys = {k: v for k, v in overrides.items() if k.split(".")[0] in (*STUDY_KEYS, "name")}
    rest = {k: v for k, v in overrides.items() if k not in study_keys}
    out = set_dotted(data, rest, f"{where} (--set)")
    try:
        return apply_dotted(out, study_keys, f"{where} (--set)", _study_route)
    except OverrideError as e:
        raise VariantError(str(e)) from None


def _study_route(key: str) -> tuple[tuple[str, ...], list[str]]:
    """`sweep.` and `ablations.NAME.set.` hold dotted keys themselves: the rest of the key is one key there."""
    parts = key.split(".")
    if parts[0] == "sweep" and len(parts) > 1:
        return ("sweep",), [".".join(parts[1:])]
    if parts[0] == "ablations" and len(parts) > 3 and parts[2] == "set":
        return tuple(parts[:3]), [".".join(parts[3:])]
    return (), parts


# --------------------------------------------------------------------------- arms


BUDGET_ALIASES = ("group_size", "updates")


def normalize_key(key: str) -> str:
    """`group_size` / `updates.minibatches` -> `budget.group_size` / `budget.updates.minibatches`:
    the budget wins over the variant in training, so that is where a sweep or override must go."""
    return f"budget.{key}" if key.split(".")[0] in BUDGET_ALIASES else key


def route_key(key: str, where: str) -> str:
    """"set" when a dotted key addresses the variant (a slot or a variant field), "run" when it
    addresses the run config. Raises VariantError (with close matches) for anything else."""
    head = key.split(".")[0]
    if head in PER_ARM_KEYS:
        raise VariantError(f"{where}: {head!r} {PER_ARM_KEYS[head]}")
    if head in ("slots", "set", *BUDGET_ALIASES) or head in V.Slots.model_fields:
        return "set"
    if head in RunConfig.model_fields and head not in ("name", "study", "arm", "seed", "output_dir", "variant"):
        return "run"
    allowed = sorted(set(V.Slots.model_fields) | set(RunConfig.model_fields) | {"group_size", "updates"})
    hint = did_you_mean(head, allowed)
    raise VariantError(f"{where}: {head!r} is neither a variant slot/field nor a run-config key{hint}")


def _fmt_value(v: Any) -> str:
    s = json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else str(v).lower() if isinstance(v, bool) else str(v)
    return _SAFE.sub("_", s).strip("_") or "_"


def _base_name(variant_name: str) -> str:
    """The arm name of a variant entry: a registry name, or a variant file's stem."""
    return Path(variant_name).stem if variant_name.endswith((".yaml", ".yml")) else variant_name


def _bases(st: Study) -> list[tuple[str, str, dict[str, Any]]]:
    """(arm base name, variant, set) for every variant and ablation, in file order."""
    shared = dict(st.set)
    out = [(_base_name(v), v, dict(shared)) for v in st.variants]
    out += [(name, ab.variant, {**shared, **ab.set}) for name, ab in st.ablations.items()]
    return out


def sweep_points(st: Study) -> list[dict[str, Any]]:
    """The grid over `sweep` (keys in file order); [{}] when there is no sweep."""
    keys = list(st.sweep)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(st.sweep[k] for k in keys))]


def expand_arms(st: Study) -> list[Arm]:
    """Every arm of the study: (variant or ablation) x sweep point x seed, labelled and configured.

    Raises VariantError when a label repeats or an arm's run config does not validate."""
    base_data = st.model_dump(exclude=set(STUDY_KEYS) | {"path"})
    where = st.path or str(st.name)
    arms: list[Arm] = []
    for base, variant_name, sets in _bases(st):
        for point in sweep_points(st):
            suffix = "".join(f"-{k}={_fmt_value(v)}" for k, v in point.items())
            for seed in st.seeds or [0]:
                label = f"{base}{suffix}-s{seed}"
                arms.append(_make_arm(st, base_data, where, label, base, variant_name, sets, point, seed))
    labels = [a.label for a in arms]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise VariantError(f"{where}: arm labels repeat: {', '.join(dup)}")
    same = duplicate_sweep_arms(arms)
    if same:
        pairs = "; ".join(f"{a} = {b}" for a, b in same)
        raise VariantError(f"{where}: key 'sweep': points that give the same arm twice ({pairs}): values equal once "
                           "read as numbers (1e-3 and 1.0e-3 are both 0.001); list each value once")
    return arms


def _make_arm(st: Study, base_data: dict[str, Any], where: str, label: str, base: str, variant_name: str,
              sets: dict[str, Any], point: dict[str, Any], seed: int) -> Arm:
    data = copy.deepcopy(base_data)
    norm = {normalize_key(k): v for k, v in point.items()}
    run_keys = {k: v for k, v in norm.items() if route_key(k, where) == "run"}
    var_keys = {k.removeprefix("set."): v for k, v in norm.items() if route_key(k, where) == "set"}
    arm_set = {**sets, **var_keys}
    data = set_dotted(data, run_keys, f"{where} (arm {label})")
    group = _SEED_SUFFIX.sub("", label)
    data.update(name=label, variant=variant_name, set=arm_set, seed=seed, study=st.name, arm=group,
                output_dir=str(st.study_dir() / label))
    cfg = parse_run_config(data, f"{where} (arm {label})")
    origin = f"ablations.{base}.set" if base in st.ablations else "set (--set)"
    if var_keys:
        origin += " / sweep"
    return Arm(label=label, base=base, seed=seed, sweep=dict(point), config=cfg, overrides=arm_set, origin=origin)


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
        who = f"arm {group}" + (f" (seeds {', '.join(str(_seed_of(x)) for x in labels)})" if len(labels) > 1 else "")
        try:
            v = V.load_variant(arm.config.variant, arm.config.set)
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
    """The metric each sampling filter names against the arm's rewards (zoo.components.filter);
    nothing when the rewards do not resolve (run_checks reports that)."""
    from zoo.components.filter import check_filter_metrics
    from zoo.rewards.compute import resolve_rewards

    try:
        rewards = [c for c, _ in resolve_rewards(cfg.rewards, cfg.plugins)]
        return check_filter_metrics(v.slots.filter, rewards, {"max_new_tokens": cfg.budget.max_new_tokens})
    except ValueError:  # run_checks / check_variant report it
        return [], []


def _override_origin(msg: str, arm: Arm) -> str:
    """An override error names the registry file it was applied to; say where the override was written."""
    where = arm.origin
    out, n = re.subn(r"^\S+ \(overrides\): ", f"{where}: ", msg, count=1)
    if n == 0 and arm.config.set:  # raised while building the overridden variant
        sets = ", ".join(f"{k}={v}" for k, v in arm.config.set.items())
        out = f"{msg} (with {where}: {sets})"
    return out


def run_checks(cfg: RunConfig, v: V.Variant) -> list[str]:
    """What `zoo run` would reject before loading a model: reward names, minibatches vs completions
    per step, a local model path that does not exist."""
    from zoo.models import EMBEDDED_ALIASES
    from zoo.rewards.compute import resolve_rewards

    errors = []
    try:
        resolve_rewards(cfg.rewards, cfg.plugins)
    except ValueError as e:
        errors.append(f"rewards: {e}")
    g = cfg.budget.group_size or v.group_size
    upd = cfg.budget.updates or v.updates
    n = cfg.budget.prompts_per_step * g
    if upd.minibatches > n:
        errors.append(f"budget: updates.minibatches {upd.minibatches} > {n} completions per step "
                      "(prompts_per_step x group_size)")
    m = str(cfg.model)
    if m not in EMBEDDED_ALIASES and (m.startswith((".", "/", "~")) and not Path(m).expanduser().exists()):
        errors.append(f"model: local path {m!r} does not exist")
    return errors


def _seed_of(label: str) -> str:
    m = _SEED_SUFFIX.search(label)
    return m.group(1) if m else "?"


def check_study_file(path: str | Path) -> Report:
    """`zoo validate STUDY.yaml`: schema, arms and every arm's variant; problems go into the Report."""
    rep = Report()
    try:
        data = _read(Path(path))
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


def single_arm_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The RunConfig of a study with exactly one arm (`zoo run study.yaml`), after dotted overrides
    (`budget.steps=2`, `set.clip=ppo`, `clip.eps_high=0.3`, `seed=1`, `variants=[grpo]`, `sweep={}`).
    Raises VariantError listing the arms when there are several."""
    p = Path(path)
    data = _read(p)
    run_over, var_over = {}, {}
    for k, val in (overrides or {}).items():
        k = normalize_key(str(k))
        if k == "seed":
            data["seeds"] = [val]
        elif k in STUDY_KEYS:
            data[k] = val
        elif k.startswith("set."):
            var_over[k.removeprefix("set.")] = val
        elif k.split(".")[0] in RunConfig.model_fields:
            run_over[k] = val
        elif route_key(k, f"{p}: override {k!r}") == "set":
            var_over[k] = val
    data = set_dotted(data, run_over, f"{p} (overrides)") if run_over else data
    arms = expand_arms(parse_study(data, str(p), default_name=p.stem))
    if len(arms) != 1:
        raise VariantError(
            f"{p}: `zoo run` needs a study with exactly one arm, this one has {len(arms)}: "
            f"{', '.join(a.label for a in arms)}. Run them all with `zoo ablate {p}`, or narrow it to one "
            f"with --set, e.g. `zoo run {p} --set 'variants=[{arms[0].config.variant}]' --set 'ablations={{}}' "
            f"--set 'sweep={{}}' --set seed={arms[0].seed}`."
        )
    if var_over:
        cfg = arms[0].config
        return parse_run_config({**cfg.model_dump(), "set": {**cfg.set, **var_over}}, f"{p} (overrides)")
    return arms[0].config


# --------------------------------------------------------------------------- run


def arm_status(run_dir: Path) -> tuple[str, str | None]:
    """(status, error) of an arm folder: finished | failed | interrupted (Ctrl-C / SIGTERM; a re-run
    resumes it) | unfinished (has metrics: running, or killed) | pending."""
    summ = read_summary(run_dir)
    if summ.get("status") in ("finished", "failed", "interrupted"):
        return summ["status"], summ.get("error")
    return ("unfinished" if (run_dir / "metrics.jsonl").exists() else "pending"), None


def read_summary(run_dir: Path) -> dict[str, Any]:
    """summary.json of an arm ({} if missing or unreadable)."""
    from zoo.tracking import read_json

    return read_json(Path(run_dir) / "summary.json")


def write_arm_config(arm: Arm) -> Path:
    """Write the arm's resolved RunConfig to `<arm dir>/config.yaml` (runnable with `zoo run`)."""
    out = arm.config.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(arm.config.model_dump(mode="json"), sort_keys=False))
    return path


def _write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a per-process temp file, then rename: shards may write concurrently)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


def write_index(st: Study, arms: list[Arm]) -> Path:
    """`<study dir>/study.json`: every arm (all shards) with variant, seed, status, error and paths,
    read from the arms' folders at the time of writing (so shards may write it concurrently)."""
    rows = []
    for a in arms:
        d = a.config.out_dir()
        status, error = arm_status(d)
        rows.append({"label": a.label, "arm": a.group, "base": a.base, "variant": a.config.variant,
                     "seed": a.seed, "sweep": a.sweep, "set": a.overrides, "status": status, "error": error,
                     "dir": str(d), "config": str(d / "config.yaml"), "metrics": str(d / "metrics.jsonl"),
                     "summary": str(d / "summary.json")})
    path = st.study_dir() / "study.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    from zoo import lock

    with lock.locked(st.study_dir() / ".study.lock", what=f"study index {path}", wait=30.0):
        _write_json(path, {"name": st.name, "file": st.path, "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
                           "arms": rows})
    return path


def select_shard(arms: list[Arm], shard: tuple[int, int] | None) -> list[Arm]:
    """Arms i, i+n, i+2n, ... of the arms sorted by label (0-based i). Raises VariantError on a bad shard."""
    ordered = sorted(arms, key=lambda a: a.label)
    if shard is None:
        return ordered
    i, n = shard
    if n < 1 or not 0 <= i < n:
        raise VariantError(f"--shard {i}/{n}: need 0 <= i < n (e.g. --shard 0/2 and --shard 1/2)")
    return ordered[i::n]


def parse_shard(text: str) -> tuple[int, int]:
    """"1/4" -> (1, 4). Raises VariantError on anything else."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise VariantError(f"--shard {text!r}: expected i/n, e.g. 0/2")
    shard = int(m.group(1)), int(m.group(2))
    select_shard([], shard)
    return shard


def _key_overrides(arm: Arm) -> str:
    parts = [f"{k}={_fmt_value(v)}" for k, v in arm.overrides.items()]
    parts += [f"{k}={_fmt_value(v)}" for k, v in arm.sweep.items() if k not in arm.overrides]
    return ", ".join(parts) or "-"


def print_plan(st: Study, arms: list[Arm], console: Any, total: int) -> None:
    """A rich table of the arms to run: arm, variant, seed, key overrides, status."""
    from rich.table import Table

    t = Table(title=f"study {st.name}: {len(arms)} of {total} arm(s) -> {st.study_dir()}")
    for col in ("arm", "variant", "seed", "overrides", "status"):
        t.add_column(col)
    for a in arms:
        t.add_row(a.label, a.config.variant, str(a.seed), _key_overrides(a), arm_status(a.config.out_dir())[0])
    console.print(t)


def run_command(config_path: Path) -> str:
    """The shell command that runs (or resumes) one arm from its written config."""
    import shlex

    return shlex.join(["zoo", "run", str(config_path)])


def run_study(st: Study, *, dry_run: bool = False, shard: tuple[int, int] | None = None,
              train_fn: Callable[..., Any] | None = None, console: Any = None, fresh: tuple[str, ...] = ()) -> int:
    """Run (or with dry_run only plan) a study's arms; see the module doc and issue 4.

    Every arm's variant is checked before anything runs (VariantError lists all problems). Each
    arm's config.yaml is written first. An arm folder holding results of another config (see
    zoo.fingerprint) is an error naming the changed keys, raised before anything runs, unless the
    arm's label or group is in `fresh` (its results are then deleted and it is retrained). Finished
    arms with the same fingerprint are skipped, arms whose lease another process holds
    (zoo.lock) are skipped and said so, others run with `train_fn(cfg, resume=True)` (default
    `zoo.trainer.train`). An arm that raises is recorded in its summary.json (status failed, error,
    traceback tail) and the study goes on. Writes study.json (under the study's lease), then
    report.md (`zoo.report.write_report`). Returns 0 iff every selected arm finished (dry run: 0 when
    the plan is valid)."""
    from rich.console import Console

    console = console or Console()
    all_arms = expand_arms(st)
    rep = check_arms(all_arms, st.plugins)
    if not rep.ok:
        raise VariantError("\n".join(rep.errors))
    for w in rep.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    arms = select_shard(all_arms, shard)
    foreign = [why for a in arms if (why := foreign_arm_dir(st.study_dir(), a.config.out_dir(), str(st.name)))]
    if foreign:
        raise VariantError("\n".join(f"{why}: not this study's arm; move it away or give the study another "
                                      "output_dir" for why in foreign))
    from zoo.arm_claim import plan_conflicts

    conflicts = plan_conflicts(all_arms, arms, st.path or str(st.name), fresh)
    print_plan(st, arms, console, len(all_arms))
    if conflicts and not dry_run:
        raise VariantError("\n".join(conflicts))
    for c in conflicts:
        console.print(f"[yellow]would refuse:[/] {c}", highlight=False, soft_wrap=True)
    if dry_run:
        for a in arms:
            console.print(run_command(write_arm_config(a)), highlight=False, soft_wrap=True)
        return 0
    train_fn = train_fn or _default_train()
    write_index(st, all_arms)
    results = {}
    for a in arms:
        try:
            results[a.label] = _run_arm(a, train_fn, console, fresh=a.label in fresh or a.group in fresh,
                                        study_file=st.path)
        finally:  # also on Ctrl-C: study.json then shows the arm interrupted, not pending
            write_index(st, all_arms)
    _final_report(st, console)
    bad = [k + (" (in use by another process)" if s == "locked" else "") for k, s in results.items() if s != "finished"]
    console.print(f"study {st.name}: {len(arms) - len(bad)}/{len(arms)} arm(s) finished"
                  + (f"; not finished: {', '.join(bad)}" if bad else ""), highlight=False)
    return 0 if not bad else 1


def _default_train() -> Callable[..., Any]:
    from zoo import trainer

    return trainer.train


def _run_arm(arm: Arm, train_fn: Callable[..., Any], console: Any, fresh: bool = False,
             study_file: str | None = None) -> str:
    """Run one arm unless zoo.arm_claim skips it (finished with the same fingerprint, or "locked" by
    another process); returns its final status. Exceptions become status failed."""
    from zoo.arm_claim import claim

    lease, action = claim(arm.label, arm.config, console, fresh, study_file)
    if lease is None:
        return action
    try:
        return _train_arm(arm, train_fn, console)
    finally:
        lease.release()


def _train_arm(arm: Arm, train_fn: Callable[..., Any], console: Any) -> str:
    """Train (or resume) one claimed arm; returns its final status. Exceptions become status failed."""
    d = arm.config.out_dir()
    status, _ = arm_status(d)
    write_arm_config(arm)
    console.print(f"[bold]run[/] {arm.label}" + (" (resuming)" if status in ("unfinished", "failed", "interrupted") else ""),
                  highlight=False)
    try:
        result = train_fn(arm.config, resume=True)
    except KeyboardInterrupt as e:  # the study stops; the arm is recorded as interrupted (resumable)
        if arm_status(d)[0] != "interrupted":  # interrupted before the trainer could say so (e.g. loading)
            _record_failure(d, e, status="interrupted")
        raise
    except Exception as e:  # noqa: BLE001 - the study goes on
        _record_failure(d, e)
        console.print(f"[red]failed[/] {arm.label}: {type(e).__name__}: {e}", highlight=False)
        return "failed"
    status, error = arm_status(d)
    if status not in ("finished", "failed"):  # a train_fn that returns without writing summary.json
        summ = dict(result) if isinstance(result, Mapping) else {}
        summ.setdefault("status", "finished")
        _write_json(d / "summary.json", summ)
        status, error = arm_status(d)
    if status == "failed":
        console.print(f"[red]failed[/] {arm.label}: {error}", highlight=False)
    return status


def _record_failure(run_dir: Path, e: BaseException, status: str = "failed") -> None:
    """Mark summary.json `status` (failed, or interrupted) with the error and the last lines of the
    traceback (keeps other keys)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    summ = read_summary(run_dir)
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    summ.update(status=status, error=f"{type(e).__name__}: {e}", traceback="".join(tb)[-4000:])
    _write_json(run_dir / "summary.json", summ)


def _final_report(st: Study, console: Any) -> None:
    """report.md for the study; a report problem is printed, never fatal for the study."""
    from zoo import report

    try:
        path = report.write_report(st.study_dir(), console=console)
        console.print(f"report: {path}", highlight=False)
    except Exception as e:  # noqa: BLE001
        console.print(f"[yellow]warning:[/] report failed: {type(e).__name__}: {e}", highlight=False)
