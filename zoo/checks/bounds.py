"""Work that looks unbounded or wasted, from the loaded (or meta-device) model and the task's prompts:
warnings, the run still starts.

- `model_opts.lora.r` above the width min(in, out) of a layer LoRA adapts: the update B A cannot have
  rank above that width, so the extra rank adds parameters and compute but no expressiveness;
- `budget.prompts_per_step` far above the task's prompts: one step repeats every prompt many times,
  all its completions generated before the step's first update (the trainer's progress bar shows the
  completions generated inside such a step: zoo.backends.generate.progress).
"""

from __future__ import annotations

from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import AfterLoad

#: a step asking for more than this many times the task's prompts is warned about
PROMPT_REPEAT_WARN = 4


def lora_widths(model: Any, targets: list[str]) -> dict[str, int]:
    """{module name: min(in_features, out_features)} of the modules LoRA adapts (named by the last part
    of their name, as peft's `target_modules` list matches them), in a plain or a peft model."""
    return {
        name: min(int(m.in_features), int(m.out_features))
        for name, m in model.named_modules()
        if name.split(".")[-1] in targets and hasattr(m, "in_features") and hasattr(m, "out_features")
    }


def lora_rank_warnings(cfg: Any, model: Any) -> list[str]:
    """A warning naming the narrowest adapted layer when `model_opts.lora.r` exceeds its width; []
    without LoRA, a model, or an adapted layer."""
    lora = getattr(cfg.model_opts, "lora", None)
    if lora is None or model is None:
        return []
    widths = lora_widths(model, list(lora.target_modules))
    if not widths or lora.r <= min(widths.values()):
        return []
    name = min(widths, key=widths.get)
    return [
        f"model_opts.lora.r = {lora.r} is larger than the width of the layers it adapts ({name.split('.')[-1]!r} "
        f"in {name!r}: min(in, out) = {widths[name]}): a rank above a layer's width adds parameters but no "
        f"expressiveness; use r <= {min(widths.values())}"
    ]


def work_warnings(cfg: Any, group_size: int, task_rows: int) -> list[str]:
    """A warning when `budget.prompts_per_step` is above PROMPT_REPEAT_WARN x the task's `task_rows`
    prompts (train and eval); [] otherwise."""
    b = cfg.budget
    if not task_rows or b.prompts_per_step <= PROMPT_REPEAT_WARN * task_rows:
        return []
    return [
        f"budget.prompts_per_step = {b.prompts_per_step} is {b.prompts_per_step / task_rows:.3g}x the task's "
        f"{task_rows} prompts: each step repeats every prompt about {b.prompts_per_step // task_rows} times "
        f"({b.prompts_per_step * group_size} completions per step, all generated before the step's first "
        "update); lower budget.prompts_per_step"
    ]


_META: dict[str, Any] = {}  # config.json text -> its meta-device model (a study's arms build it once)


def _lora_model(s: AfterLoad) -> Any:
    """The loaded policy, else (zoo validate) a meta-device model built from config.json when the run
    uses LoRA (cached per config); None otherwise."""
    model = s.model
    if model is None and getattr(s.cfg.model_opts, "lora", None) is not None and s.model_config is not None:
        from zoo.checks.params import meta_model

        key = s.model_config.to_json_string() if hasattr(s.model_config, "to_json_string") else repr(s.model_config)
        if key not in _META:
            _META[key] = meta_model(s.model_config)
        model = _META[key]
    return model


@check("lora_rank", "after_load")
def lora_rank(s: AfterLoad, rep: Report) -> None:
    """`lora_rank_warnings` on the loaded policy or the meta-device model (`_lora_model`)."""
    rep.warnings += lora_rank_warnings(s.cfg, _lora_model(s))


@check("lora_targets", "after_load")
def lora_targets(s: AfterLoad, rep: Report) -> None:
    """`zoo.models.lora_targets.unmatched_targets` on the loaded policy or the meta-device model
    (`_lora_model`): `model_opts.lora.target_modules` entries that name no module."""
    from zoo.models.lora_targets import unmatched_targets

    lora = getattr(s.cfg.model_opts, "lora", None)
    model = _lora_model(s)
    if lora is not None and model is not None:
        rep.errors += unmatched_targets(model, list(lora.target_modules))


@check("prompts_per_step_vs_task", "after_load")
def prompts_per_step_vs_task(s: AfterLoad, rep: Report) -> None:
    g = s.cfg.budget.group_size or s.variant.group_size
    rep.warnings += work_warnings(s.cfg, g, len(s.rows))
