"""The sections of a run file (`budget`, `optim`, `model_opts`, `training`, `sampling`, `eval`, `guards`,
`checkpoint`, `tracking`): one pydantic model each, gathered by `zoo.config.run.RunConfig` (which
re-exports them). Unknown keys are errors (`Strict`).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, ValidationInfo, field_validator

from zoo.config.schema import MIN_TEMPERATURE, Spec, Strict, sampling_temperature
from zoo.config.user_keys import shown
from zoo.config.variant import Updates

#: completions per `generate` call in training when `sampling.batch_size` is unset (at least G, so a
#: group is never split). Decoding reads every weight once per token whatever the batch, so up to the
#: point where it becomes compute-bound a bigger batch is nearly free (docs/results/performance-decode.md: 32 rows in
#: one call vs 4 calls of 8); without gradients a row needs only its KV cache, far less than a training
#: forward.
GENERATE_BATCH = 32
#: completions per `generate` call in evaluation (`eval.batch_size`): what the shipped studies used
#: (their budget.micro_batch 16, when evaluation took max(micro_batch, 8))
EVAL_BATCH = 16


class Budget(Strict):
    """How much work one run does. `group_size`, `updates` and `critic_warmup` override the variant's when set."""

    steps: int = Field(8, ge=1, description="rollout steps (each: generate, score, update)")
    prompts_per_step: int = Field(8, ge=1, description="prompts per rollout step (groups), over all ranks")
    group_size: int | None = Field(None, ge=1, description="completions per prompt G (default: the variant's)")
    updates: Updates | None = Field(None, description="epochs x minibatches per rollout (default: the variant's)")
    max_new_tokens: int = Field(64, ge=1, description="generation budget per completion (tokens)")
    micro_batch: int = Field(
        8,
        ge=1,
        description="completions per forward of the training models over the rollout: "
        "each forward/backward of the update, and the no-grad rollout forwards (old and reference "
        "log-probs, values); generation and evaluation have their own (sampling.batch_size, "
        "eval.batch_size)",
    )
    max_resample_rounds: int = Field(4, ge=0, description="dynamic sampling: extra generation rounds per step")
    critic_warmup: int | None = Field(
        None,
        ge=0,
        description="rollout steps at the start in which only the critic "
        "trains, the policy frozen (value pretraining; default: the variant's)",
    )


Beta = Annotated[float, Field(ge=0, lt=1)]
MAX_NAME_CHARS = 200  # a run name is a folder name: most file systems allow 255 bytes


class Optim(Strict):
    """AdamW with gradient-norm clipping, linear warm-up, then a constant/linear/cosine schedule."""

    lr: float = Field(1e-5, gt=0)
    critic_lr: float | None = Field(None, gt=0, description="default: lr")
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="Adam's (beta1, beta2), each in [0, 1)")
    warmup_steps: int = Field(0, ge=0, description="optimizer steps of linear warm-up")
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    max_grad_norm: float | None = Field(1.0, gt=0)
    fused: bool = Field(
        False,
        description="torch's fused AdamW kernel (4-5x faster optimizer steps on CPU; the "
        "same update up to float rounding, ~1e-7 relative, so not bit-identical to the default)",
    )


class Lora(Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"])


class ModelOpts(Strict):
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    autocast: Literal["auto", "none", "bf16", "fp16"] = Field(
        "auto",
        description="mixed precision for forward passes; auto: bf16 where the GPU or CPU runs it natively, "
        "else none (fp32); see zoo.run.precision",
    )
    lora: Lora | None = None
    gradient_checkpointing: bool = False
    cache_casts: bool = Field(
        True,
        description="under bf16/fp16 autocast keep each frozen weight's low-precision cast across forwards "
        "(bit-identical; 2 bytes per frozen weight element); false: autocast casts in every forward",
    )


class Training(Strict):
    """How the run spreads over the processes a launcher starts (zoo/backends/train/strategy.py, docs/guides/training-strategy.md)."""

    strategy: Literal["single", "ddp", "fsdp"] = Field(
        "single",
        description="single: one process; ddp: DistributedDataParallel; fsdp: FSDP2 fully_shard "
        "(weights, gradients and optimizer state sharded over ranks)",
    )


class Sampling(Strict):
    backend: Spec = Field(
        "hf",
        description="the generator (registry kind `generator`): a name or "
        "{name, params}, e.g. hf (default) or {name: noisy, sigma: 0.1}; `zoo list` lists them",
    )
    temperature: float = Field(1.0, description=f"logits / temperature, >= {MIN_TEMPERATURE}")
    top_p: float = Field(1.0, gt=0, le=1)
    ignore_eos: bool = Field(
        False,
        description="generate every completion to max_new_tokens (EOS suppressed): "
        "for benchmarks of cost per token, like verl's rollout.ignore_eos",
    )
    batch_size: int | None = Field(
        None,
        ge=1,
        description="completions per generate call in training (null: "
        f"max(group_size, {GENERATE_BATCH})); not in the fingerprint, a resume that "
        "changes it warns",
    )

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        return sampling_temperature(v)


class Eval(Strict):
    """Held-out evaluation: greedy accuracy and avg@k at `temperature`, on `size` prompts."""

    every: int = Field(0, ge=0, description="steps between evaluations (0: only before and after)")
    size: int = Field(32, ge=0)
    samples: int = Field(4, ge=0, description="k for avg@k (0: greedy accuracy only, no sampled completions)")
    temperature: float = Field(1.0, description=f"logits / temperature for avg@k, >= {MIN_TEMPERATURE}")
    seed: int = 1234
    enabled: bool = True
    batch_size: int = Field(EVAL_BATCH, ge=1, description="completions per generate call in evaluation")
    backend: Spec | None = Field(
        None,
        description="the generator evaluation samples with (registry kind `generator`, "
        "like sampling.backend); null: the run's sampling.backend, a wrapper such as noisy "
        "through the generator it wraps",
    )

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        return sampling_temperature(v)


class Guards(Strict):
    """When a run that cannot learn stops as `failed` (zoo/core/guards.py, docs/reference/guards.md "Guards")."""

    max_unscored_frac: float = Field(
        0.5,
        ge=0,
        le=1,
        description="a step is unscored-heavy when some reward "
        "could not score more than this fraction of its rows (1: never)",
    )
    unscored_steps: int = Field(3, ge=1, description="stop after this many consecutive unscored-heavy steps")
    max_skipped_steps: int = Field(
        3,
        ge=1,
        description="stop after this many consecutive steps in which every "
        "optimizer step was skipped for a non-finite loss or gradient norm",
    )


class Async(Strict):
    """Asynchronous training with a staleness bound (docs/guides/async.md): rollout workers generate
    groups with older weights while the trainer trains; the capacity rule (AReaL arXiv:2505.24298, "staleness-aware
    training", `max_head_offpolicyness`; SkyRL's `max_staleness_steps`) paces them so no group is trained more than `max_staleness`
    policy versions after the weights it was sampled with."""

    max_staleness: int = Field(
        ...,
        ge=0,
        description="k: a group sampled with policy version v is trained at step <= v + k "
        "(0: every group is sampled with the weights that train on it, the synchronous algorithm)",
    )
    workers: int = Field(
        1,
        ge=1,
        description="rollout workers, each with its own copy of the policy; at most budget.prompts_per_step x "
        "(max_staleness + 1), the groups the capacity rule lets be in flight (zoo.checks.async_run); "
        "not used by backend simulated (a warning)",
    )
    backend: Literal["thread", "ray", "simulated"] = Field(
        "thread",
        description="thread: each worker a thread of the trainer's process; ray: each worker a Ray "
        "actor (its own process; `pip install 'variant-zoo[ray]'`); simulated: no workers, step s "
        "samples in the trainer's process with the weights of step s - k (exact staleness for studies; "
        "`workers` is not used)",
    )

    @field_validator("max_staleness", "workers", mode="before")
    @classmethod
    def _an_integer_not_a_string(cls, v: object, info: ValidationInfo) -> object:
        """`max_staleness: '2'` is refused, not read as 2 (pydantic's lax mode would): a quoted value is
        likely a mistake, and a sweep or `set` of these keys must compare as the integer (our choice)."""
        low = next((m.ge for m in cls.model_fields[str(info.field_name)].metadata if hasattr(m, "ge")), 0)
        if isinstance(v, str):
            raise ValueError(f"expected an integer >= {low}, got {shown(v)}: write it without quotes")
        if isinstance(v, float):  # `1.0` was read as 1 and `1.5` refused with pydantic's own words
            raise ValueError(f"expected an integer >= {low}, got {shown(v)}: write a whole number, e.g. {low}")
        return v


class Checkpoint(Strict):
    every: int = Field(1, ge=1, description="save every N steps (and always at the end)")


class WandbOpts(Strict):
    project: str = "variant-zoo"
    entity: str | None = None
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="default: offline unless a key is set"
    )
    tags: list[str] = Field(default_factory=list)
    table_every: int = Field(2, ge=1, description="steps between sample-completion tables")


class Tracking(Strict):
    wandb: Union[WandbOpts, bool] = Field(default_factory=WandbOpts)

    def wandb_opts(self) -> WandbOpts | None:
        if self.wandb is False:
            return None
        return WandbOpts() if self.wandb is True else self.wandb  # type: ignore[return-value]
