"""`zoo run FILE`: a run file, or a study file with exactly one arm, as one RunConfig.

The run file's schema and reading are `zoo.config.run`; a study's arms are `zoo.study.experiment`'s
(config is a lower layer than studies, so it cannot ask the study module itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from zoo.config.run import RunConfig, is_study, parse_run_config, read_run_file, set_dotted
from zoo.config.variant import VariantError
from zoo.study.experiment import (
    ABLATION_RUN_KEYS,
    STUDY_KEYS,
    expand_arms,
    normalize_key,
    parse_study,
    read_study_file,
    route_key,
)
from zoo.study.study_checks import study_term_errors


def load_run_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Read a run YAML, apply dotted `--set` overrides (`budget.steps=3`), validate. A study file with
    one arm (`variants`, `ablations`, `seeds` or `sweep`) gives that arm (`single_arm_config`).
    Raises VariantError naming the file and the key."""
    p = Path(path)
    data = read_run_file(p)
    if is_study(data):
        return single_arm_config(p, overrides)  # a study with one arm also runs
    data = set_dotted(data, overrides or {}, str(p))
    cfg = parse_run_config(data, str(p))
    cfg._source = str(p)  # errors about its variant values name this file and the user's key
    return cfg


def single_arm_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The RunConfig of a study with exactly one arm (`zoo run study.yaml`), after dotted overrides
    (`budget.steps=2`, `set.clip=ppo`, `clip.eps_high=0.3`, `seed=1`, `variants=[grpo]`, `sweep={}`).
    Raises VariantError listing the arms when there are several."""
    p = Path(path)
    data = read_study_file(p)
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
    unknown = study_term_errors(arms[0], ABLATION_RUN_KEYS)
    if unknown:  # said as `zoo validate` says them (zoo.study.validate.in_study_terms)
        raise VariantError("\n".join(line for _, line in unknown))
    if var_over:
        cfg = arms[0].config
        return parse_run_config({**cfg.model_dump(), "set": {**cfg.set, **var_over}}, f"{p} (overrides)")
    return arms[0].config
