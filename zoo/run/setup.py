"""Build one run before its first step: the config checks, seeding, models (policy, reference, critic),
rewards, optimizers and schedulers, gathered into a `zoo.step.types.RunState`.

    st = setup(cfg)  # zoo.run.trainer.train calls it; zoo.bench calls it for a measured run

`validate_run` is the `before_load` check alone (nothing loads); `setup` runs it unless given its result.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import torch

from zoo import checks
from zoo.backends.generate.backend import build_generator
from zoo.backends.train import strategy
from zoo.checks.fit import available_memory
from zoo.config.run import RunConfig, batch_sizes, generate_batch_size
from zoo.config.variant import Variant, VariantError
from zoo.core import dist
from zoo.rewards.compute import resolve_rewards
from zoo.rewards.critic_init import critic_from_reward_model, critic_init, reward_model_spec
from zoo.rewards.session import open_rewards
from zoo.run.precision import describe, resolve_autocast
from zoo.run.provenance import provenance
from zoo.step.types import Models, RunState, Slots, StepSettings

log = logging.getLogger(__name__)


def validate_run(cfg: RunConfig) -> tuple[Variant, list[str]]:
    """The `before_load` checks (zoo.checks) of `cfg` for this process's launcher (WORLD_SIZE): nothing
    loads. Raises VariantError with every error, one per line; returns (effective variant, warnings)."""
    rep, v = checks.before_load(cfg)
    if rep.errors:
        raise VariantError("\n".join(rep.errors))
    return v, rep.warnings


def _scheduler(opt: torch.optim.Optimizer, cfg: RunConfig, total: int):
    """transformers' `get_scheduler`: linear warm-up over `warmup_steps` optimizer steps (from lr 0 at
    the first step, as in TRL/HF Trainer), then constant, linear to 0 or cosine over `total` steps."""
    from transformers import get_scheduler

    warm, kind = cfg.optim.warmup_steps, cfg.optim.schedule
    name = "constant_with_warmup" if kind == "constant" and warm else kind
    return get_scheduler(name, opt, num_warmup_steps=warm, num_training_steps=total)


def _adamw(params, lr: float, cfg: RunConfig) -> torch.optim.Optimizer:
    """torch's AdamW; `optim.fused` selects its fused kernel (one kernel over every tensor instead of a
    per-tensor loop: measured 4-5x faster per optimizer step on CPU, docs/results/performance-step.md) where every
    parameter is a plain CPU or CUDA float tensor; sharded (DTensor) parameters keep the default."""
    params = list(params)
    fused = (
        bool(cfg.optim.fused)
        and bool(params)
        and all(
            type(p) is torch.nn.Parameter
            and p.device.type in ("cpu", "cuda")
            and p.dtype in (torch.float32, torch.bfloat16, torch.float16)
            for p in params
        )
    )
    return torch.optim.AdamW(
        params, lr=lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay, **({"fused": True} if fused else {})
    )


def setup(
    cfg: RunConfig, device: torch.device | None = None, checked: tuple[Variant, list[str]] | None = None
) -> RunState:
    """Load everything one run needs (models last, after every config check has passed). checked:
    what `validate_run(cfg)` returned when the caller ran it already (else it runs here)."""
    from zoo import models as zm

    v, warnings = checked or validate_run(cfg)
    for w in warnings:
        log.warning(w)
    dist.init_from_env()  # under torchrun / accelerate launch: join the process group
    slots = Slots.of(v, {"max_new_tokens": cfg.budget.max_new_tokens})
    _seed_everything(cfg.seed)  # the same on every rank until the models are built (LoRA, value head init)
    task, stream, resample_stream = _task_streams(cfg)
    rewards = resolve_rewards(cfg.rewards, cfg.plugins)
    names = [c.name for c, _ in rewards]
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    precision, why = resolve_autocast(cfg.model_opts.autocast, device)  # once per run: settings, evaluator, provenance
    logging.getLogger("zoo.run.precision").info("autocast %s: %s", precision, why)
    src, models, reference, teacher = _load_models(cfg, v, slots, task, device, precision)
    if dist.rank():  # built identically everywhere; from here on each rank samples from its own stream
        _seed_everything(cfg.seed + dist.rank())
    rewards = open_rewards(rewards, device)  # stateful rewards (a reward model) load once, here
    gold = open_rewards(resolve_rewards(cfg.gold, cfg.plugins), device) if cfg.gold else []
    policy, critic = models.policy, models.critic
    opt, sched, copt, csched = _optimizers(cfg, v, policy, critic)
    prov = provenance(
        cfg,
        src,
        {"policy": zm.count_parameters(policy), "critic": zm.count_parameters(critic) if critic else None},
        precision=describe(precision, why),
        batch_sizes=batch_sizes(cfg, v.group_size),
    )
    return RunState(
        cfg=cfg,
        variant=v,
        slots=slots,
        models=models,
        settings=_settings(cfg, v, precision),
        optimizer=opt,
        scheduler=sched,
        critic_optimizer=copt,
        critic_scheduler=csched,
        stream=stream,
        resample_stream=resample_stream,
        task=task,
        rewards=rewards,
        reward_names=names,
        reference=reference,
        device=device,
        controllers=[c() for c in slots.controllers],
        provenance=prov,
        gold=[c for c, _ in gold],
        generator=build_generator(cfg.sampling.backend, policy, models.tokenizer, **_with_processor(models.processor)),
        teacher=teacher,
    )


def _with_processor(processor: Any) -> dict[str, Any]:
    """`build_generator`'s processor keyword for a vision-language policy; none for text (called as before)."""
    return {} if processor is None else {"processor": processor}


def _task_streams(cfg: RunConfig) -> tuple[Any, Any, Any]:
    """(task, its training prompt stream, the stream extra resampling rounds draw from)."""
    from zoo.tasks import PromptStream, load_task
    from zoo.tasks.base import derive_seed

    task = load_task(cfg.task)
    stream = PromptStream(task.train, seed=cfg.seed)
    # extra rounds of dynamic sampling draw from their own stream, so step k's first-round prompts are
    # the same in every arm of a study (paired comparison), whatever the filters dropped before
    resample_stream = PromptStream(task.train, seed=derive_seed(cfg.seed, "resample"))
    return task, stream, resample_stream


def _load_models(
    cfg: RunConfig, v: Variant, slots: Slots, task: Any, device: torch.device, precision: str
) -> tuple[Any, Models, Any, Any]:
    """The policy (checked once loaded), the reference, critic and teacher the variant reads, wrapped by
    `training.strategy`: (the model's source, Models, the reference, the teacher)."""
    from zoo import models as zm
    from zoo.models.vlm import is_image_text, load_processor

    src = zm.resolve_model(cfg.model)
    lora = cfg.model_opts.lora.model_dump() if cfg.model_opts.lora else None
    policy, tok = zm.load_policy(
        src,
        dtype=cfg.model_opts.dtype,
        lora=lora,
        gradient_checkpointing=cfg.model_opts.gradient_checkpointing,
        device=device,
    )
    processor = None
    if is_image_text(policy.config):  # a vision-language policy: its processor turns prompt + images into inputs
        processor = load_processor(src.path)
        tok = processor.tokenizer
    _check_loaded(cfg, v, policy, tok, task, device)
    reference = zm.make_reference(policy) if slots.reads("logp_ref") else None
    critic = None
    if slots.reads("values"):  # some component reads the critic's values (gae, a loss term, ...)
        critic = _make_critic(cfg, v, policy, tok, lora, device)
    # a distill: variant's teacher, once per run; before the strategy wraps the policy, so a frozen or EMA
    # copy is a plain module (zoo.models.teacher)
    teacher = _open_teacher(cfg, v, policy, device)
    if cfg.model_opts.cache_casts and precision in ("bf16", "fp16") and cfg.training.strategy != "fsdp":
        # frozen weights (LoRA base, reference copy, critic backbone) cast to bf16 once, not every forward
        for m in (policy, critic, reference.model if reference is not None else None):
            if m is not None:
                zm.cache_frozen_casts(m)
    par = strategy.wrap(
        policy,
        critic,
        reference.model if reference is not None and not reference.shares_policy else None,
        cfg.training.strategy,
        device,
        precision,
    )
    models = Models(
        policy=policy,
        tokenizer=tok,
        processor=processor,
        critic=critic,
        parallel=par,
        reference=(lambda: zm.reference_forward(reference)) if reference is not None else None,
    )
    return src, models, reference, teacher


def _check_loaded(
    cfg: RunConfig, v: Variant, policy: torch.nn.Module, tok: Any, task: Any, device: torch.device
) -> None:
    """The `after_load` checks (zoo.checks) on the loaded policy: VariantError with every error; warnings logged."""
    rep = checks.after_load(
        cfg, v, policy.config, tok, rows=task.train + task.eval, available=available_memory(device), model=policy
    )
    if rep.errors:
        raise VariantError("\n".join(rep.errors))
    for w in rep.warnings:  # e.g. a LoRA rank above the layer width (zoo.checks.fit)
        log.warning(w)
    for n in rep.notes:
        log.info(n)


def _settings(cfg: RunConfig, v: Variant, precision: str) -> StepSettings:
    return StepSettings(
        temperature=cfg.sampling.temperature,
        micro_batch=cfg.budget.micro_batch,
        max_new_tokens=cfg.budget.max_new_tokens,
        epochs=v.updates.epochs,
        minibatches=v.updates.minibatches,
        autocast=precision,
        max_grad_norm=cfg.optim.max_grad_norm,
        generate_batch=generate_batch_size(cfg, v.group_size),
    )


def _optimizers(cfg: RunConfig, v: Variant, policy: torch.nn.Module, critic: torch.nn.Module | None) -> tuple[Any, ...]:
    """(policy optimizer, its scheduler, critic optimizer, its scheduler); the critic's are None without a critic."""
    total = cfg.budget.steps * v.updates.epochs * v.updates.minibatches
    opt = _adamw([p for p in policy.parameters() if p.requires_grad], cfg.optim.lr, cfg)
    copt = (
        _adamw([p for p in critic.parameters() if p.requires_grad], cfg.optim.critic_lr or cfg.optim.lr, cfg)
        if critic
        else None
    )
    return opt, _scheduler(opt, cfg, total), copt, _scheduler(copt, cfg, total) if copt else None


def _make_critic(
    cfg: RunConfig, v: Variant, policy: torch.nn.Module, tok: Any, lora: dict | None, device: torch.device
) -> torch.nn.Module:
    """The value model: from the policy (default) or, with `critic.init: reward_model`, from the run's
    reward model (zoo.rewards.critic_init; `after_load` checked that the tokenizers agree)."""
    from zoo import models as zm

    if critic_init(v) != "reward_model":
        return zm.make_critic(policy, lora).to(device)
    spec = reward_model_spec(list(cfg.rewards)) or {}  # its tokenizer is the policy's (zoo.checks.inputs)
    return critic_from_reward_model(
        spec["model"],
        dtype=next(policy.parameters()).dtype,
        device=device,
        lora=lora,
        checkpointing=cfg.model_opts.gradient_checkpointing,
    )


def _open_teacher(cfg: RunConfig, v: Variant, policy: torch.nn.Module, device: torch.device) -> Any:
    """The teacher of a `distill:` variant (zoo.models.teacher), or None. The before_load checks made
    sure the run has a `teacher:` block and that a separate teacher's tokenizer is the policy's."""
    if v.distill is None:
        return None
    from zoo.models.teacher import open_teacher

    return open_teacher(v.distill.teacher, policy, cfg.teacher, device)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
