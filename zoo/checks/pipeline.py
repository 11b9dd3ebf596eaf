"""The two stages every entry point runs (`zoo run`, `zoo validate`, `zoo ablate`, `zoo bench`):

    rep, variant = before_load(cfg)              # the config alone: nothing loads
    rep = after_load(cfg, variant, model_config, tokenizer, rows=..., available=...)

`before_load` checks the plugins, the variant and its slots, declared reads, rewards and gold, the
generator, the task and its environment, budget and minibatches, strategy and world size, the model path
and the critic init; `after_load` the context length, the rollout's memory, the critic's tokenizer,
the parameter count and a LoRA rank or prompts_per_step beyond what the model or task holds
(warnings), from the model's config.json and tokenizer and a meta-device model
(`zoo validate` loads no weights: `model_files`, `check_loadable`). A study checks each arm with
both (zoo.study.validate). The order of the checks: BEFORE_LOAD, AFTER_LOAD; the checks themselves
(`zoo.checks.registry` registers them) are in `variant` (plugins, the variant and its slots, rewards
and what the components read from them), `settings` (generator, strategy, model path, run warnings),
`inputs` (task, env, teacher, critic init, parameter count), `images` (a task's images against the
policy) and `fit` (budget, context length, memory,
bounds).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

# the checks register on import, each module's in the order it defines them: fit before settings, so the checks
# outside BEFORE_LOAD / AFTER_LOAD keep their order (completions_ceiling, then settings' lora_targets); `variant`
# under another name, which leaves that name to after_load's parameter
from zoo.checks import async_run, fit, images, inputs, settings  # noqa: F401 - images, async_run register checks
from zoo.checks import variant as _variant  # noqa: F401
from zoo.checks.registry import AfterLoad, BeforeLoad, Report, run_stage

#: the order of the stages' checks (a later check reads what an earlier one built; others run last)
BEFORE_LOAD = (
    "plugins",
    "variant",
    "rewards",
    "reward_reads",
    "generator",
    "task",
    "images",
    "env",
    "minibatches",
    "prompts_per_rank",
    "strategy",
    "model_path",
    "critic_init",
    "teacher",
    "async",
    "run_warnings",
)
AFTER_LOAD = ("images_loaded", "context_length", "memory_estimate", "critic_tokenizer", "parameter_count")


def launch_env() -> tuple[int, bool]:
    """(world size, launched) of this process: torchrun / accelerate launch set WORLD_SIZE."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1), "WORLD_SIZE" in os.environ


def before_load(
    cfg: Any, *, world_size: int | None = None, launched: bool | None = None, origin: str = "set"
) -> tuple[Report, Any]:
    """Every `before_load` check of run config `cfg` (nothing loads). world_size / launched: the
    processes the run will have (default: this process's launcher, `launch_env`); origin: where the
    run's `set:` overrides were written, for messages. Returns (report, the effective variant or
    None when it does not build). Raises nothing: problems are the report's lines."""
    ws, env_launched = launch_env()
    s = BeforeLoad(
        cfg,
        world_size=ws if world_size is None else world_size,
        launched=env_launched if launched is None else launched,
        origin=origin,
    )
    rep = run_stage("before_load", s, BEFORE_LOAD)
    return rep, s.variant


def after_load(
    cfg: Any,
    variant: Any,
    model_config: Any,
    tokenizer: Any,
    *,
    rows: Sequence[dict[str, Any]] = (),
    available: int | None = None,
    model: Any = None,
) -> Report:
    """Every `after_load` check: cfg and its effective variant (from `before_load`), the policy's
    transformers config and tokenizer, the task's prompts `rows` (train and eval), `available` bytes
    on the run's device (None: the memory check is skipped), and the model when it is loaded (else a
    meta-device one is built from model_config). Raises nothing."""
    s = AfterLoad(cfg, variant, model_config, tokenizer, rows=rows, available=available, model=model)
    return run_stage("after_load", s, AFTER_LOAD)


_FILES: dict[str, tuple[Any, Any] | None] = {}  # model dir@config.json mtime -> (config, tokenizer): read once


def model_files(cfg: Any) -> tuple[Any, Any] | None:
    """(transformers config, tokenizer) of the run's policy from local files only (config.json and
    the tokenizer files; no weights): a local directory, the embedded model once converted, or a
    `tiny-vlm:` model (built and cached here). None when they are not on this machine (a Hub id,
    `arms:`, the embedded model not converted yet)."""
    from pathlib import Path

    from transformers import AutoConfig, AutoTokenizer

    from zoo.models.sources import EMBEDDED_ALIASES, EMBEDDED_MODEL, cache_root
    from zoo.models.tiny_vlm import TINY_VLM_PREFIX, tiny_vlm_dir

    m = str(cfg.model).strip()
    if m in EMBEDDED_ALIASES:
        d: Path | None = cache_root() / "models" / EMBEDDED_MODEL
    elif m.startswith(TINY_VLM_PREFIX):  # built in code in a second (zoo.models.tiny_vlm), then cached
        try:
            d = tiny_vlm_dir(m, cache_root())
        except ValueError:  # an unknown kind: the `images` check names it
            return None
    else:
        d = settings.local_path(m)
    if d is None or not (d / "config.json").is_file():
        return None
    key = f"{d.resolve()}@{(d / 'config.json').stat().st_mtime_ns}"
    if key not in _FILES:
        try:
            _FILES[key] = AutoConfig.from_pretrained(str(d)), AutoTokenizer.from_pretrained(str(d))
        except (OSError, ValueError):
            _FILES[key] = None
    return _FILES[key]


def check_loadable(cfg: Any, variant: Any, device: Any = None, *, memory: bool = True) -> Report:
    """`after_load` as `zoo validate` and `zoo ablate` run it before any weights load: the model's
    files (`model_files`; a note and nothing else when they are not local), the task's prompts, the
    memory of `device` (default: CUDA when available, else the host; not checked with memory=False,
    for a run on another machine)."""
    import torch

    files = model_files(cfg)
    if files is None:
        return Report(
            notes=[
                f"model {cfg.model}: no local config.json, so the context length and memory are "
                "checked when the model loads"
            ]
        )
    try:
        rows = inputs.task_rows(cfg.task)
    except Exception:  # noqa: BLE001 - before_load's `task` check said why
        return Report()
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return after_load(cfg, variant, *files, rows=rows, available=fit.available_memory(device) if memory else None)
