"""`zoo run FILE`: a run file, or a study file with exactly one arm, as one RunConfig.

The run file's schema and reading are `zoo.config.run`; a study's arms are `zoo.study.experiment`'s
(config is a lower layer than studies, so it cannot ask the study module itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from zoo.config.run import RunConfig, is_study, parse_run_config, read_run_file, set_dotted
from zoo.study.experiment import single_arm_config


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
