"""The run configuration (`zoo run run.yaml`): one variant, one seed, one model and task.

A study file (`experiments/*.yaml`) holds the same keys plus `variants`, `ablations`, `seeds` and
`sweep`; each of its arms is a RunConfig. Unknown keys are errors that name the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Mapping

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationError, field_validator

from zoo.config.distill import TeacherConfig
from zoo.config.overrides import OverrideError, apply_dotted, did_you_mean
from zoo.config.run_sections import (
    EVAL_BATCH,
    GENERATE_BATCH,
    MAX_NAME_CHARS,
    Async,
    Beta,
    Budget,
    Checkpoint,
    Eval,
    Guards,
    Lora,
    ModelOpts,
    Optim,
    Sampling,
    Tracking,
    Training,
    WandbOpts,
)
from zoo.config.schema import Spec, Strict, finite_number, format_validation
from zoo.config.set_flag import close_keys
from zoo.config.tta import not_a_run_file
from zoo.config.user_keys import shown
from zoo.config.variant import Slots, UnknownVariant, Variant, VariantError, load_variant, read_yaml_file

# the sections live in zoo.config.run_sections; they stay importable from here
__all__ = [
    "EVAL_BATCH",
    "GENERATE_BATCH",
    "MAX_NAME_CHARS",
    "NEEDS",
    "Async",
    "OUTPUT_KEYS",
    "STUDY_ONLY_KEYS",
    "WHAT_IT_TRAINS",
    "Beta",
    "Budget",
    "Checkpoint",
    "Eval",
    "Guards",
    "Lora",
    "ModelOpts",
    "Optim",
    "RunConfig",
    "Sampling",
    "Spec",
    "Tracking",
    "Training",
    "VariantRef",
    "WandbOpts",
    "async_opts",
    "batch_sizes",
    "effective_variant",
    "generate_batch_size",
    "is_study",
    "parse_run_config",
    "read_run_file",
    "reward_specs",
    "says_nothing",
    "set_dotted",
]


VARIANT_FORMS = "a registry name (`grpo`; `zoo list` lists them) or a variant file path (`my_variant.yaml`)"
REWARD_FORMS = (
    "a name (`correctness`) or a mapping `{name: <reward>, weight: <w>, <its parameters>}` (`zoo list` lists "
    "the rewards)"
)


def variant_ref(value: Any) -> Any:
    """A variant as a run or study file names it (`variant:`, `variants:` items, an ablation's `variant:`).
    Raises ValueError saying the forms it takes for anything but a non-empty string."""
    if isinstance(value, str) and value.strip():
        return value
    raise ValueError(f"expected a variant: {VARIANT_FORMS}; got {shown(value)}")


VariantRef = Annotated[str, BeforeValidator(variant_ref)]


class RunConfig(Strict):
    """Everything one arm needs. `variant` names a registry variant or a file; `set` overrides its slots."""

    name: str = "run"
    variant: VariantRef = "grpo"
    set: dict[str, Any] = Field(default_factory=dict, description="dotted overrides into the variant")
    model: str = "smollm2-135m-instruct-q4"
    model_opts: ModelOpts = Field(default_factory=ModelOpts)
    training: Training = Field(default_factory=Training)
    task: dict[str, Any] = Field(default_factory=lambda: {"name": "reasoning_gym", "dataset": "basic_arithmetic"})
    rewards: list[Spec] = Field(default_factory=lambda: ["correctness"])
    gold: list[Spec] = Field(
        default_factory=list,
        description="rewards scored and logged as gold/<name> but "
        "never trained on (a gold measure next to the proxy; Gao et al. arXiv:2210.10760)",
    )
    teacher: TeacherConfig | None = Field(None, description="the teacher of a `distill:` variant")
    budget: Budget = Field(default_factory=Budget)
    optim: Optim = Field(default_factory=Optim)
    sampling: Sampling = Field(default_factory=Sampling)
    eval: Eval = Field(default_factory=Eval)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    guards: Guards = Field(default_factory=Guards)
    seed: int = 0
    ref_reset_every: int | None = Field(
        None, ge=1, description="DeepSeekMath Alg. 1: reference <- policy every M steps"
    )
    plugins: list[str] = Field(default_factory=list)
    tracking: Tracking = Field(default_factory=Tracking)
    # `async:` is a Python keyword, so the field is declared through the class namespace (pydantic reads
    # it like any other: the key, the dump and the errors say `async`); read it with `async_opts(cfg)`
    __annotations__["async"] = "Async | None"
    locals()["async"] = Field(
        None,
        description="asynchronous training with a staleness bound: {max_staleness: k, workers: n, "
        "backend: thread | ray} (docs/guides/async.md); absent: the synchronous step",
    )
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
            raise ValueError(
                f"the name names the output folder runs/<name>: at most {MAX_NAME_CHARS} characters, got {len(v)}"
            )
        bad = sorted({c for c in v if not c.isprintable()})
        if bad:
            raise ValueError(
                f"{v!r} names the output folder runs/<name>: no newlines or other control characters "
                f"(found {', '.join(repr(c) for c in bad)})"
            )
        return v

    @field_validator("rewards", "gold", mode="before")
    @classmethod
    def _rewards_are_a_list(cls, v: Any, info: Any) -> Any:
        """A list of names or mappings; `rewards: correctness` says to write `[correctness]`."""
        if not isinstance(v, list):
            fix = f": write `{info.field_name}: [{v}]`" if isinstance(v, str) and v else ""
            raise ValueError(f"expected a list of rewards, each {REWARD_FORMS}; got {shown(v)}{fix}")
        for i, spec in enumerate(v):
            if not isinstance(spec, (str, dict)):
                raise ValueError(f"item {i} is {shown(spec)}: each reward is {REWARD_FORMS}")
        return v

    @field_validator("rewards", "gold")
    @classmethod
    def _reward_has_a_name(cls, v: list[Any]) -> list[Any]:
        for i, spec in enumerate(v):
            if isinstance(spec, dict) and not spec.get("name"):
                items = ", ".join(f"{k}: {x}" for k, x in spec.items())
                raise ValueError(f"item {i}, {{{items}}}, has no 'name': each reward is {REWARD_FORMS}")
        return v

    def out_dir(self) -> Path:
        return Path(self.output_dir or Path("runs") / self.name)

    def __eq__(self, other: object) -> bool:
        """The same configuration: every field equal (the file it was read from, `_source`, is not compared)."""
        if not isinstance(other, RunConfig):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic's models are


def async_opts(cfg: Any) -> Async | None:
    """The run's `async:` block, or None (the synchronous step)."""
    return getattr(cfg, "async", None)


def generate_batch_size(cfg: RunConfig, group_size: int) -> int:
    """Completions per generate call in training: `sampling.batch_size`, else max(G, GENERATE_BATCH)."""
    return cfg.sampling.batch_size if cfg.sampling.batch_size is not None else max(group_size, GENERATE_BATCH)


def batch_sizes(cfg: RunConfig, group_size: int) -> dict[str, int]:
    """The batch sizes as the run resolves them, by their keys (recorded in provenance): generation and
    evaluation change the sampled tokens (a different split draws the random numbers in another order,
    and under bf16 a row's numerics depend on its batch), the micro-batch the training forwards."""
    return {
        "sampling.batch_size": generate_batch_size(cfg, group_size),
        "eval.batch_size": cfg.eval.batch_size,
        "budget.micro_batch": cfg.budget.micro_batch,
    }


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
    (`run.yaml: set.kl.beta = -1: must be >= 0 (applied to registry/grpo.yaml, ...)`, zoo.config.user_keys;
    `run.yaml: key 'variant': variant 'grpoo' not found; ...` for a name no registry holds)."""
    from zoo.config.user_keys import source_of, user_key_first

    try:
        v = load_variant(cfg.variant, cfg.set)
    except VariantError as e:
        if isinstance(e, UnknownVariant) and e.name == str(cfg.variant) and source_of(cfg):
            raise VariantError(f"{source_of(cfg)}: key 'variant': {e}") from None  # not a `base:` of it
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
    tta = not_a_run_file(data, str(p))
    if tta:
        raise VariantError(tta)
    if ("slots" in data or "base" in data) and "variant" not in data:
        raise VariantError(
            f"{p}: this is a variant file (it has `slots`/`base`); train it from a run file "
            f"with `variant: {p}` (see examples/run_grpo.yaml), or `zoo run examples/run_grpo.yaml "
            f"--set variant={p}`"
        )
    for k in OUTPUT_KEYS:  # a run directory's config.yaml carries what the run resolved; not inputs
        data.pop(k, None)
    return data


WHAT_IT_TRAINS = ("variant", "model", "task")
NEEDS = (
    "a run file needs at least `variant`, `model` or `task` to say what it trains (every other key has a "
    "default; see examples/run_grpo.yaml)"
)


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


def _unknown_key_hint(key: str) -> str:
    """The close run-file keys for an unknown override `key` (its first part against the top-level
    keys, then the whole key and its first part against every dotted key: `stesp` -> `budget.steps`),
    else the top-level keys."""
    head = key.split(".")[0]
    hint = did_you_mean(head, RunConfig.model_fields)
    if hint:
        return hint
    close = close_keys(key, RunConfig)
    if close:
        return f" (did you mean {' or '.join(repr(c) for c in close)}?)"
    return f"; the run-file keys: {', '.join(RunConfig.model_fields)}"


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
                raise VariantError(
                    f"{where}: override {key!r}: {parts[0]!r} is a variant slot, not a run-config key; "
                    f"write set.{key} (the variant's overrides)"
                )
            raise VariantError(f"{where}: override {key!r}: unknown key {parts[0]!r}{_unknown_key_hint(key)}")
        return (), parts

    try:
        return apply_dotted(data, overrides, where, route)
    except OverrideError as e:
        raise VariantError(str(e)) from None
