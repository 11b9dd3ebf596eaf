"""The run file's settings before anything loads, apart from the variant: the generators
(`sampling.backend`, `eval.backend`) are registered and their parameters allowed; `training.strategy`
fits the processes the run has (`WORLD_SIZE` under a launcher, or `zoo validate --nproc N`) and the
autocast; `model:` names something loadable (a local path exists and holds a checkpoint's config.json;
the embedded model, an `arms:` model and Hub ids are resolved when the model loads) and
`model_opts.lora.target_modules` names modules; and settings that would be silently ignored (a `set:`
the budget replaces, `ref_reset_every` without a KL, a critic warm-up as long as the run, a reward
model not built yet) are warned about (`run_warnings`: the run still starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.backends.train.strategy import STRATEGIES
from zoo.checks.registry import BeforeLoad, Report, check
from zoo.config.desugar import kl_parts
from zoo.config.run import RunConfig
from zoo.config.variant import Variant


# ---------------------------------------------------------------- the generators
@check("generator", "before_load")
def generator(s: BeforeLoad, rep: Report) -> None:
    """One line naming `sampling.backend` (or `eval.backend` when set), what is wrong and the known
    generators (did-you-mean)."""
    from zoo.backends.generate.backend import backend_error

    err = backend_error(s.cfg.sampling.backend)
    if err:
        rep.errors.append(err)
    err = backend_error(s.cfg.eval.backend, "eval.backend") if s.cfg.eval.backend is not None else None
    if err:
        rep.errors.append(err)


# ---------------------------------------------------------------- the strategy against the processes
def check_strategy(name: str, world_size: int, autocast: str, launched: bool = True) -> None:
    """Raise ValueError where `training.strategy` cannot work: an unknown name, several processes with
    `single` (nothing would combine their gradients), fsdp without a launcher (FSDP2 needs a process
    group, also of one process: `launched` = WORLD_SIZE is set), or fp16 autocast (no gradient scaling
    here: fp16 gradients underflow silently without a GradScaler)."""
    if name not in STRATEGIES:
        raise ValueError(f"training.strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    if name == "fsdp" and not launched:
        raise ValueError(
            "training.strategy fsdp needs a launcher, also for one process: zoo run RUN.yaml --nproc 1 "
            "(or torchrun --standalone --nproc_per_node 1 -m zoo.cli run RUN.yaml; "
            "zoo validate RUN.yaml --nproc 1 checks it as launched)"
        )
    if name == "single" and world_size > 1:
        raise ValueError(
            f"training.strategy single runs one process, but the launcher started {world_size}: "
            "set training.strategy ddp or fsdp (--set training.strategy=ddp)"
        )
    if autocast == "fp16":
        raise ValueError(
            "model_opts.autocast fp16 is not supported: training in fp16 needs a gradient scaler, "
            "which zoo does not have; use bf16 (or auto, none)"
        )


@check("strategy", "before_load")
def strategy(s: BeforeLoad, rep: Report) -> None:
    """`check_strategy` for this run's processes."""
    try:
        check_strategy(s.cfg.training.strategy, s.world_size, s.cfg.model_opts.autocast, launched=s.launched)
    except ValueError as e:
        rep.errors.append(str(e))


# ---------------------------------------------------------------- the model's path and LoRA targets
def local_path(name: Any) -> Path | None:
    """The local directory `name` means (an existing directory, or a path-like name: starts with '/',
    '.', '~' or has several '/'), else None (the embedded model, `arms:`, a Hub id)."""
    from zoo.models.sources import ARMS_PREFIX, EMBEDDED_ALIASES

    m = str(name).strip()
    if not m or m in EMBEDDED_ALIASES or m.startswith(ARMS_PREFIX):
        return None
    p = Path(m).expanduser()
    if p.is_dir() or m.startswith((".", "/", "~")) or m.count("/") > 1:
        return p
    return None


def model_dir_error(name: Any, key: str) -> str | None:
    """Why local model `name` (under `key`, e.g. `model`) cannot load: it does not exist, is not a
    directory, or holds no config.json. None when it is no local path or looks loadable."""
    p = local_path(name)
    if p is None:
        return None
    if not p.exists():
        return f"{key}: local path {str(name)!r} does not exist"
    if not p.is_dir():
        return f"{key}: local path {str(name)!r} is not a directory; give the folder save_pretrained wrote"
    if not (p / "config.json").is_file():
        return (
            f"{key}: local path {str(name)!r} has no config.json; a model directory holds config.json, the "
            "weights and the tokenizer files (as save_pretrained writes them)"
        )
    return None


@check("model_path", "before_load")
def model_path(s: BeforeLoad, rep: Report) -> None:
    """The policy's `model:` (a local path must exist and hold config.json)."""
    err = model_dir_error(s.cfg.model, "model")
    if err:
        rep.errors.append(err)


@check("lora_targets", "before_load")
def lora_targets(s: BeforeLoad, rep: Report) -> None:
    """`model_opts.lora.target_modules` names at least one module, each a non-empty name (PEFT would
    refuse an empty list only after the model loaded)."""
    lora = getattr(s.cfg.model_opts, "lora", None)
    if lora is None:
        return
    targets = list(lora.target_modules)
    if not targets or not all(isinstance(t, str) and t.strip() for t in targets):
        rep.errors.append(
            f"model_opts.lora.target_modules: {targets!r} names no module; list the linear layers LoRA adapts, "
            "e.g. [q_proj, v_proj] (the default), or remove model_opts.lora to train every weight"
        )


# ---------------------------------------------------------------- settings that would be silently ignored
BUDGET_WINS = ("group_size", "updates", "critic_warmup")  # variant fields the run's budget replaces when set


def shadowed_overrides(cfg: RunConfig) -> list[str]:
    """Variant overrides (`set: {group_size: 3}`, `set: {updates.minibatches: 2}`) that the budget
    replaces (`budget.group_size`, `budget.updates` win over the variant), one warning each."""
    out = []
    for key, value in cfg.set.items():
        head = str(key).split(".")[0]
        if head not in BUDGET_WINS:
            continue
        budget = getattr(cfg.budget, head)
        if budget is None:
            continue
        shown = budget.model_dump() if hasattr(budget, "model_dump") else budget
        out.append(
            f"set.{key} = {value} is ignored: budget.{head} = {shown} wins over the variant; "
            f"set budget.{key} instead (or remove budget.{head})"
        )
    return out


def ref_reset_unused(cfg: RunConfig, v: Variant) -> list[str]:
    """`ref_reset_every` with a variant that has no KL to the reference (`kl: none`): nothing to reset."""
    if cfg.ref_reset_every and not kl_parts(v.slots.kl_spec()).enabled:
        return [
            f"ref_reset_every = {cfg.ref_reset_every} has no effect: variant {v.name!r} has kl: none, so no "
            "reference model is kept (set slots.kl to use one, or remove ref_reset_every)"
        ]
    return []


def warmup_covers_run(cfg: RunConfig, v: Variant) -> list[str]:
    """A value-pretraining warm-up (`critic_warmup`) as long as the run: the policy never moves."""
    if v.critic_warmup and v.critic_warmup >= cfg.budget.steps:
        return [
            f"critic_warmup = {v.critic_warmup} >= budget.steps = {cfg.budget.steps}: only the critic trains, the "
            "policy never moves (set budget.critic_warmup lower, or budget.steps higher)"
        ]
    return []


#: a run of more rollout steps than this is warned about (a long real run has thousands)
STEPS_WARN = 1_000_000


def unbounded_steps(cfg: RunConfig) -> list[str]:
    """`budget.steps` above STEPS_WARN: a run that would not end in any useful time."""
    if cfg.budget.steps <= STEPS_WARN:
        return []
    return [
        f"budget.steps = {cfg.budget.steps:.3g} is more than {STEPS_WARN} rollout steps: the run would not end in "
        "any useful time (it can be stopped with Ctrl-C and resumes from its last checkpoint); lower budget.steps"
    ]


def run_warnings(cfg: RunConfig, v: Variant) -> list[str]:
    """Every warning of this module for one run config and its (overridden) variant, and a reward model
    that is not built yet (zoo.rewards.reward_model.missing_models)."""
    from zoo.rewards.reward_model import missing_models

    return (
        shadowed_overrides(cfg)
        + ref_reset_unused(cfg, v)
        + warmup_covers_run(cfg, v)
        + unbounded_steps(cfg)
        + missing_models(list(cfg.rewards) + list(cfg.gold))
    )


@check("run_warnings", "before_load")
def ignored_settings(s: BeforeLoad, rep: Report) -> None:
    """`run_warnings` of the run and its effective variant (skipped when the variant did not build)."""
    if s.variant is not None:
        rep.warnings += run_warnings(s.cfg, s.variant)


def coerce_numeric(value: Any) -> Any:
    """A numeric string as the float YAML 1.2 would read (`"1e-3"` -> 0.001), recursively in lists and
    dicts; anything else unchanged (bools stay bools)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, list):
        return [coerce_numeric(x) for x in value]
    if isinstance(value, dict):
        return {k: coerce_numeric(x) for k, x in value.items()}
    return value
