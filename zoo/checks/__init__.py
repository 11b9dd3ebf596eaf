"""One check pipeline: `zoo run`, `zoo validate`, `zoo ablate` and `zoo bench` call the same stages,
so validate refuses exactly what run refuses.

- `before_load(cfg) -> (Report, variant)`: the config alone, nothing loads.
- `after_load(cfg, variant, model_config, tokenizer, rows=, available=) -> Report`: the model's
  config.json and tokenizer (no weights; a meta-device model).

A check is a small registered function (`zoo.checks.registry.check(name, stage)`); the modules here
hold them by stage: `variant` (the plugins, the variant and its rewards), `settings` (the run file's
other settings), `inputs` (the task, env, teacher and critic init, the model's size) and `fit` (the
budget against the processes, the context and the memory; bounds); `registry` the plumbing (Report, the
subjects, the registered checks), `pipeline` the order. Messages name the file and key, what is
allowed, and a did-you-mean.
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
from zoo.checks.registry import CHECKS, Report, check, names

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
