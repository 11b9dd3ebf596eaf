"""What `zoo validate` checks in one file, with `--set` applied as the command that runs the file
applies it: a study as `zoo ablate` (`zoo.study.experiment.load_study`'s overrides), a run file as
`zoo run` (`zoo.config.run.set_dotted`), a variant file as `zoo show`, a `zoo rm` file as `zoo rm`,
a `zoo tta` file (a top-level `tta:`) as `zoo tta` (zoo.checks.tta).
Messages about a key a `--set` gave lead with the flag (`zoo.config.set_flag.blame_set_flag`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from zoo.checks.registry import Report
from zoo.config.tta import is_tta_file, not_a_run_file

#: keys that only a `zoo rm` file has, by command (zoo.rm.config: RMTrainConfig, PairsConfig)
_RM_KEYS = {"zoo rm train": ("data",), "zoo rm pairs": ("judge", "samples", "length_bias", "label_noise")}


def rm_command(data: Any) -> str | None:
    """`zoo rm train` / `zoo rm pairs` when `data` is a mapping with one of that command's own keys and
    none of a variant's (`slots`, `base`) or a run's (`variant`, `variants`); else None."""
    if not isinstance(data, dict) or any(k in data for k in ("slots", "base", "variant", "variants")):
        return None
    return next((cmd for cmd, keys in _RM_KEYS.items() if any(k in data for k in keys)), None)


def is_study(data: dict[str, Any]) -> bool:
    """A run or study file (else a variant file): one of their keys, or, in a file without `slots` or
    `base`, a key that is not a variant field but close to a run/study key (`varient: grpo`)."""
    import difflib

    from zoo.config.run import RunConfig
    from zoo.config.variant import Variant
    from zoo.study.experiment import STUDY_KEYS

    if any(k in data for k in ("variants", "task", "model", "budget", "ablations", "variant")):
        return True
    if "slots" in data or "base" in data:
        return False
    run_keys = sorted(set(RunConfig.model_fields) | set(STUDY_KEYS))
    unknown = [
        str(k) for k in data if k not in Variant.model_fields and k not in ("base", "plugins", "sources", "path")
    ]
    return any(difflib.get_close_matches(k, run_keys, n=1, cutoff=0.8) for k in unknown)


def check_file(f: Path, sets: dict[str, Any], nproc: int | None) -> Report:
    """`zoo validate F --set ... [--nproc N]`: the Report of file `f` (module doc)."""
    from zoo.checks.variant import check_variant
    from zoo.config import variant
    from zoo.config.run import NEEDS, says_nothing
    from zoo.config.set_flag import blame_set_flag

    rep, schema = Report(), None
    try:
        data = variant.read_yaml_file(f)
        why = says_nothing(data)
        if why:
            raise variant.VariantError(f"{f}: {why}; {NEEDS}; a variant file needs `name` and `slots`")
        rm = rm_command(data)
        if is_tta_file(data):  # a `zoo tta` file (zoo.config.tta)
            rep = check_tta_file(f, data, sets)
        elif tta_keys := not_a_run_file(data, str(f)):  # a `zoo tta` file's keys without their `tta:`
            rep.errors.append(tta_keys)
        elif rm:
            from zoo.rm.config import PairsConfig, RMTrainConfig, load_config

            schema = RMTrainConfig if rm == "zoo rm train" else PairsConfig
            load_config(f, schema, sets)
            rep.notes.append(f"{f}: a `{rm}` file: its keys checked (the model and data are read when it runs)")
        elif isinstance(data, dict) and is_study(data):
            from zoo.config.run import RunConfig

            schema = RunConfig
            rep = check_run_or_study(f, sets, world_size=nproc, launched=True if nproc else None)
        else:
            schema = variant.Variant
            rep = check_variant(variant.load_variant(f, sets))
    except (variant.VariantError, yaml.YAMLError, ValueError) as e:
        rep.errors.append(str(e))
    for kind in ("errors", "warnings"):
        setattr(rep, kind, [blame_set_flag(m, sets, schema, source=f) for m in getattr(rep, kind)])
    return rep


def check_tta_file(f: Path, data: Any, sets: dict[str, Any]) -> Report:
    """A `zoo tta` file's Report (zoo.checks.tta); `--set` is refused, naming the file."""
    from zoo.checks.tta import check_tta_data

    if sets:
        return Report(errors=[f"{f}: a `zoo tta` file takes no --set; edit the file's `tta:` keys"])
    rep, ok = check_tta_data(data, str(f))
    if ok is not None:
        what = f"variant {ok.tta.variant}" if ok.tta.method == "variant" else "method tpt"
        if ok.study is not None:
            what = f"a study of {len(ok.study.arms)} arm(s) x {len(ok.study.seeds)} seed(s)"
        rep.notes.append(f"{f}: a `zoo tta` file ({what}): run it with `zoo tta {f}`, not `zoo run`")
    return rep


def check_run_or_study(
    path: Path, sets: dict[str, Any], *, world_size: int | None = None, launched: bool | None = None
) -> Report:
    """`zoo.study.validate.check_study_file` with `sets` applied: a study's as `zoo ablate` applies
    them, a run file's as `zoo run` does; without `sets`, check_study_file itself."""
    from zoo.study.validate import check_study_file

    if not sets:
        return check_study_file(path, world_size=world_size, launched=launched)
    from zoo.config.run import parse_run_config, set_dotted
    from zoo.config.variant import VariantError
    from zoo.study.experiment import STUDY_KEYS, Arm, expand_arms, load_study, read_study_file
    from zoo.study.study_checks import shared_set_overrides
    from zoo.study.validate import check_arms

    rep = Report()
    try:
        data = read_study_file(Path(path))
        study = load_study(path, overrides=sets) if any(k in data for k in STUDY_KEYS) else None
        if study is not None:
            arms, plugins = expand_arms(study), study.plugins
        else:  # a run file: one arm, read as zoo.study.run_file.load_run_config reads it
            cfg = parse_run_config(set_dotted(data, sets, str(path)), str(path))
            cfg._source = str(path)  # a run file: its errors lead with the file and the user's key
            arms, plugins = [Arm(cfg.name, cfg.arm or cfg.name, cfg.seed, {}, cfg, dict(cfg.set))], cfg.plugins
    except VariantError as e:
        rep.errors.append(str(e))
        return rep
    rep.extend(check_arms(arms, plugins, world_size=world_size, launched=launched))
    if study is not None:
        rep.warnings += shared_set_overrides(study)
    if rep.ok:
        rep.notes.append(f"{path}: {len(arms)} arm(s): {', '.join(a.label for a in arms)}")
    return rep
