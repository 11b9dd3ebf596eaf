"""The run configuration (`zoo run run.yaml`): one variant, one seed, one model and task.

A study file (`experiments/*.yaml`) holds the same keys plus `variants`, `ablations`, `seeds` and
`sweep`; each of its arms is a RunConfig. Unknown keys are errors that name the file and the key.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Union

from pydantic import Field, PrivateAttr, ValidationError, field_validator

from zoo.config.overrides import OverrideError, apply_dotted, did_you_mean
from zoo.config.schema import (MIN_TEMPERATURE, Spec, Strict, finite_number, format_validation,
                               sampling_temperature)
from zoo.config.variant import Slots, Updates, Variant, VariantError, load_variant, read_yaml_file


#: completions per `generate` call in training when `sampling.batch_size` is unset (at least G, so a
#: group is never split). Decoding reads every weight once per token whatever the batch, so up to the
#: point where it becomes compute-bound a bigger batch is nearly free (docs/performance.md: 32 rows in
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
    micro_batch: int = Field(8, ge=1, description="completions per forward of the training models over the rollout: "
                             "each forward/backward of the update, and the no-grad rollout forwards (old and reference "
                             "log-probs, values); generation and evaluation have their own (sampling.batch_size, "
                             "eval.batch_size)")
    max_resample_rounds: int = Field(4, ge=0, description="dynamic sampling: extra generation rounds per step")
    critic_warmup: int | None = Field(None, ge=0, description="rollout steps at the start in which only the critic "
                                      "trains, the policy frozen (value pretraining; default: the variant's)")


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
    fused: bool = Field(False, description="torch's fused AdamW kernel (4-5x faster optimizer steps on CPU; the "
                        "same update up to float rounding, ~1e-7 relative, so not bit-identical to the default)")


class Lora(Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"])


class ModelOpts(Strict):
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    autocast: Literal["auto", "none", "bf16", "fp16"] = Field(
        "auto", description="mixed precision for forward passes; auto: bf16 where the GPU or CPU runs it natively, "
        "else none (fp32); see zoo.run.precision")
    lora: Lora | None = None
    gradient_checkpointing: bool = False


class Training(Strict):
    """How the run spreads over the processes a launcher starts (zoo/backends/train/strategy.py, docs/configuration.md)."""

    strategy: Literal["single", "ddp", "fsdp"] = Field(
        "single", description="single: one process; ddp: DistributedDataParallel; fsdp: FSDP2 fully_shard "
        "(weights, gradients and optimizer state sharded over ranks)")


class Sampling(Strict):
    backend: Spec = Field("hf", description="the generator (registry kind `generator`): a name or "
                          "{name, params}, e.g. hf (default) or {name: noisy, sigma: 0.1}; `zoo list` lists them")
    temperature: float = Field(1.0, description=f"logits / temperature, >= {MIN_TEMPERATURE}")
    top_p: float = Field(1.0, gt=0, le=1)
    ignore_eos: bool = Field(False, description="generate every completion to max_new_tokens (EOS suppressed): "
                             "for benchmarks of cost per token, like verl's rollout.ignore_eos")
    batch_size: int | None = Field(None, ge=1, description="completions per generate call in training (null: "
                                   f"max(group_size, {GENERATE_BATCH})); not in the fingerprint, a resume that "
                                   "changes it warns")

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
    backend: Spec | None = Field(None, description="the generator evaluation samples with (registry kind `generator`, "
                                 "like sampling.backend); null: the run's sampling.backend, a wrapper such as noisy "
                                 "through the generator it wraps")

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        return sampling_temperature(v)


class Guards(Strict):
    """When a run that cannot learn stops as `failed` (zoo/core/guards.py, docs/configuration.md "Guards")."""

    max_unscored_frac: float = Field(0.5, ge=0, le=1, description="a step is unscored-heavy when some reward "
                                     "could not score more than this fraction of its rows (1: never)")
    unscored_steps: int = Field(3, ge=1, description="stop after this many consecutive unscored-heavy steps")
    max_skipped_steps: int = Field(3, ge=1, description="stop after this many consecutive steps in which every "
                                   "optimizer step was skipped for a non-finite loss or gradient norm")


class Checkpoint(Strict):
    every: int = Field(1, ge=1, description="save every N steps (and always at the end)")


class WandbOpts(Strict):
    project: str = "variant-zoo"
    entity: str | None = None
    mode: Literal["online", "offline", "disabled"] | None = Field(None, description="default: offline unless a key is set")
    tags: list[str] = Field(default_factory=list)
    table_every: int = Field(2, ge=1, description="steps between sample-completion tables")


class Tracking(Strict):
    wandb: Union[WandbOpts, bool] = Field(default_factory=WandbOpts)

    def wandb_opts(self) -> WandbOpts | None:
        if self.wandb is False:
            return None
        return WandbOpts() if self.wandb is True else self.wandb  # type: ignore[return-value]


class RunConfig(Strict):
    """Everything one arm needs. `variant` names a registry variant or a file; `set` overrides its slots."""

    name: str = "run"
    variant: str = "grpo"
    set: dict[str, Any] = Field(default_factory=dict, description="dotted overrides into the variant")
    model: str = "smollm2-135m-instruct-q4"
    model_opts: ModelOpts = Field(default_factory=ModelOpts)
    training: Training = Field(default_factory=Training)
    task: dict[str, Any] = Field(default_factory=lambda: {"name": "reasoning_gym", "dataset": "basic_arithmetic"})
    rewards: list[Spec] = Field(default_factory=lambda: ["correctness"])
    gold: list[Spec] = Field(default_factory=list, description="rewards scored and logged as gold/<name> but "
                             "never trained on (a gold measure next to the proxy; Gao et al. arXiv:2210.10760)")
    budget: Budget = Field(default_factory=Budget)
    optim: Optim = Field(default_factory=Optim)
    sampling: Sampling = Field(default_factory=Sampling)
    eval: Eval = Field(default_factory=Eval)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    guards: Guards = Field(default_factory=Guards)
    seed: int = 0
    ref_reset_every: int | None = Field(None, ge=1, description="DeepSeekMath Alg. 1: reference <- policy every M steps")
    plugins: list[str] = Field(default_factory=list)
    tracking: Tracking = Field(default_factory=Tracking)
    output_dir: str | None = None
    study: str | None = Field(None, description="set by `zoo ablate`: the study this arm belongs to")
    arm: str | None = None
    _source: str | None = PrivateAttr(None)  # the run file read (zoo.config.user_keys names it in errors)

    @field_validator("name")
    @classmethod
    def _name_is_a_folder(cls, v: str) -> str:
        if not v or v in (".", "..") or "/" in v or "\\" in v:
            raise ValueError(f"{v!r} names the output folder runs/<name>: no '/' and not '.' or '..'")
        if len(v) > MAX_NAME_CHARS:
            raise ValueError(f"the name names the output folder runs/<name>: at most {MAX_NAME_CHARS} characters, "
                             f"got {len(v)}")
        bad = sorted({c for c in v if not c.isprintable()})
        if bad:
            raise ValueError(f"{v!r} names the output folder runs/<name>: no newlines or other control characters "
                             f"(found {', '.join(repr(c) for c in bad)})")
        return v

    @field_validator("rewards", "gold")
    @classmethod
    def _reward_has_a_name(cls, v: list[Any]) -> list[Any]:
        for i, spec in enumerate(v):
            if isinstance(spec, dict) and not spec.get("name"):
                shown = ", ".join(f"{k}: {x}" for k, x in spec.items())
                raise ValueError(f"item {i}, {{{shown}}}, has no 'name': each reward is a name (`correctness`) or a "
                                 "mapping `{name: <reward>, weight: <w>, <its parameters>}` (`zoo list` lists the "
                                 "rewards)")
        return v

    def out_dir(self) -> Path:
        return Path(self.output_dir or Path("runs") / self.name)

    def __eq__(self, other: object) -> bool:
        """The same configuration: every field equal (the file it was read from, `_source`, is not compared)."""
        if not isinstance(other, RunConfig):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic's models are


def generate_batch_size(cfg: RunConfig, group_size: int) -> int:
    """Completions per generate call in training: `sampling.batch_size`, else max(G, GENERATE_BATCH)."""
    return cfg.sampling.batch_size if cfg.sampling.batch_size is not None else max(group_size, GENERATE_BATCH)


def batch_sizes(cfg: RunConfig, group_size: int) -> dict[str, int]:
    """The batch sizes as the run resolves them, by their keys (recorded in provenance): generation and
    evaluation change the sampled tokens (a different split draws the random numbers in another order,
    and under bf16 a row's numerics depend on its batch), the micro-batch the training forwards."""
    return {"sampling.batch_size": generate_batch_size(cfg, group_size), "eval.batch_size": cfg.eval.batch_size,
            "budget.micro_batch": cfg.budget.micro_batch}


def reward_specs(cfg: RunConfig) -> list[tuple[str, dict[str, Any], float]]:
    """(name, params, weight) per reward objective; `weight` defaults to 1."""
    out = []
    for spec in cfg.rewards:
        if isinstance(spec, str):
            out.append((spec, {}, 1.0))
        else:
            d = dict(spec)
            name = d.pop("name", None)
            if name is None:
                raise VariantError(f"rewards: {spec!r} has no 'name'")
            try:
                w = finite_number(d.pop("weight", 1.0), f"rewards: {name}: weight")
            except ValueError as e:
                raise VariantError(str(e)) from None
            out.append((str(name), d, w))
    return out


def effective_variant(cfg: RunConfig) -> Variant:
    """The variant with the run's overrides (`set`) and the budget's group_size/updates applied.
    Raises VariantError; for a run read from a file, one that leads with the file and the user's key
    (`run.yaml: set.kl.beta = -1: must be >= 0 (applied to registry/grpo.yaml, ...)`, zoo.config.user_keys)."""
    from zoo.config.user_keys import user_key_first

    try:
        v = load_variant(cfg.variant, cfg.set)
    except VariantError as e:
        raise VariantError(user_key_first(str(e), cfg, built_with_set=True)) from None
    upd: dict[str, Any] = {}
    if cfg.budget.group_size is not None:
        upd["group_size"] = cfg.budget.group_size
    if cfg.budget.updates is not None:
        upd["updates"] = cfg.budget.updates
    if cfg.budget.critic_warmup is not None:
        upd["critic_warmup"] = cfg.budget.critic_warmup
    return v.model_copy(update=upd)


def parse_run_config(data: Mapping[str, Any], where: str) -> RunConfig:
    """Validate a dict as a RunConfig; errors name `where` and the key (with close matches)."""
    try:
        return RunConfig.model_validate(dict(data))
    except ValidationError as e:
        raise VariantError(format_validation(e, where, RunConfig)) from None


OUTPUT_KEYS = ("resolved_variant", "provenance", "fingerprint")


STUDY_ONLY_KEYS = ("variants", "ablations", "seeds", "sweep")  # a file with one of them is a study file


def read_run_file(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a run (or study) YAML, without the keys a run directory's config.yaml
    adds (`OUTPUT_KEYS`). Raises VariantError naming the file when it is empty, not a mapping, or a
    variant file. `zoo.study.run_file.load_run_config` reads a run or one-arm study file with it."""
    p = Path(path)
    data = read_yaml_file(p)
    why = says_nothing(data)
    if why:
        raise VariantError(f"{p}: {why}; {NEEDS}")
    if not isinstance(data, dict):
        raise VariantError(f"{p}: expected a mapping at the top level")
    if ("slots" in data or "base" in data) and "variant" not in data:
        raise VariantError(f"{p}: this is a variant file (it has `slots`/`base`); train it from a run file "
                           f"with `variant: {p}` (see examples/run_grpo.yaml), or `zoo run examples/run_grpo.yaml "
                           f"--set variant={p}`")
    for k in OUTPUT_KEYS:  # a run directory's config.yaml carries what the run resolved; not inputs
        data.pop(k, None)
    return data


WHAT_IT_TRAINS = ("variant", "model", "task")
NEEDS = ("a run file needs at least `variant`, `model` or `task` to say what it trains (every other key has a "
         "default; see examples/run_grpo.yaml)")


def says_nothing(data: Any) -> str | None:
    """Why a run file says nothing about what it trains (so it would run every default), else None:
    it is empty, has no keys, or holds only run-config keys (`name`, `budget`, ...) and none of
    `WHAT_IT_TRAINS`. A file with a study key, a variant's `slots`/`base`, or an unknown key is left
    to the checks that name those."""
    if data is None:
        return "the file is empty"
    if data == {}:
        return "the file has no keys"
    if not isinstance(data, dict) or is_study(data) or not set(map(str, data)) <= set(RunConfig.model_fields):
        return None
    if any(k in data for k in WHAT_IT_TRAINS):
        return None
    return f"the file sets only {', '.join(f'`{k}`' for k in data)}, so it would train every default"


def is_study(data: Mapping[str, Any]) -> bool:
    """Whether a run-file mapping is a study (it has `variants`, `ablations`, `seeds` or `sweep`)."""
    return any(k in data for k in STUDY_ONLY_KEYS)


def set_dotted(data: dict[str, Any], overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Apply `a.b.c = v` overrides to a run-file dict (new dict; `zoo.config.overrides` does the setting).
    Keys under `set.` go to the variant's overrides as one dotted key (`set.clip.eps=0.1` ->
    `set: {clip.eps: 0.1}`). Raises VariantError for a key that is not a run-config key (with the
    close match) or a path through a list or a scalar."""
    def route(key: str) -> tuple[tuple[str, ...], list[str]]:
        parts = key.split(".")
        if parts[0] == "set" and len(parts) > 1:
            return ("set",), [".".join(parts[1:])]
        if parts[0] not in RunConfig.model_fields:
            if parts[0] in Slots.model_fields or parts[0] == "entropy_coef":  # a variant key, not a run key
                raise VariantError(f"{where}: override {key!r}: {parts[0]!r} is a variant slot, not a run-config key; "
                                   f"write set.{key} (the variant's overrides)")
            hint = did_you_mean(parts[0], RunConfig.model_fields)
            raise VariantError(f"{where}: override {key!r}: unknown key {parts[0]!r}{hint}")
        return (), parts

    try:
        return apply_dotted(data, overrides, where, route)
    except OverrideError as e:
        raise VariantError(str(e)) from None
