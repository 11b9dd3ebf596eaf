"""One check pipeline: `zoo run`, `zoo validate`, `zoo ablate` and `zoo bench` call the same stages,
so validate refuses exactly what run refuses.

- `before_load(cfg) -> (Report, variant)`: the config alone, nothing loads.
- `after_load(cfg, variant, model_config, tokenizer, rows=, available=) -> Report`: the model's
  config.json and tokenizer (no weights; a meta-device model).

A check is a small registered function (`zoo.checks.registry.check(name, stage)`); each module here
holds the checks of one concern. Messages name the file and key, what is allowed, and a did-you-mean.
"""

from zoo.checks.pipeline import (
    AFTER_LOAD,
    BEFORE_LOAD,
    after_load,
    before_load,
    check_loadable,
    launch_env,
    model_files,
)
from zoo.checks.registry import CHECKS, check, names
from zoo.checks.report import Report

__all__ = [
    "AFTER_LOAD",
    "BEFORE_LOAD",
    "CHECKS",
    "Report",
    "after_load",
    "before_load",
    "check",
    "check_loadable",
    "launch_env",
    "model_files",
    "names",
]
