"""The schemas of `zoo rm train RM.yaml` (RMTrainConfig) and `zoo rm pairs PAIRS.yaml` (PairsConfig).
Unknown keys are errors naming the file and the key (zoo.config.schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator

from zoo.config.run import Lora, Tracking
from zoo.config.schema import MIN_TEMPERATURE, Spec, Strict, format_validation, sampling_temperature
from zoo.config.variant import VariantError, read_yaml_mapping


class PairData(Strict):
    """Where the preference pairs come from: a local JSONL file (`path`) or a `datasets` source
    (`dataset`, with `config` and `split`), each row with `prompt` (optional when `chosen` and
    `rejected` are whole conversations), `chosen`, `rejected` (strings or chat-message lists) and an
    optional per-pair `margin`."""

    path: str | None = Field(None, description="local JSONL of pairs (what `zoo rm pairs` writes)")
    dataset: str | None = Field(None, description="a `datasets.load_dataset` path or name (local cache when offline)")
    config: str | None = None
    split: str = "train"
    eval_path: str | None = Field(None, description="held-out pairs (JSONL); default: eval_size pairs held out")
    eval_size: int = Field(16, ge=1, description="pairs held out for the accuracy before/after (without eval_path)")
    limit: int | None = Field(None, ge=1, description="use at most this many training pairs")

    @model_validator(mode="after")
    def _one_source(self) -> "PairData":
        if (self.path is None) == (self.dataset is None):
            raise ValueError("give exactly one of data.path (a JSONL file) and data.dataset (a datasets source)")
        return self


class RMModelOpts(Strict):
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    lora: Lora | None = Field(None, description="LoRA adapters (peft, task SEQ_CLS: the score head trains in full)")


class RMTrainConfig(Strict):
    """`zoo rm train RM.yaml`: Bradley-Terry training of a scalar reward model."""

    name: str = "rm"
    model: str = Field(description="the starting model: a causal LM (a fresh score head is added) or a reward model")
    model_opts: RMModelOpts = Field(default_factory=RMModelOpts)
    data: PairData
    margin: float = Field(
        0.0, description="m in -log sigmoid(r_chosen - r_rejected - m) (Llama 2 §3.2.2); a pair's own `margin` wins"
    )
    epochs: int = Field(1, ge=1)
    batch_size: int = Field(8, ge=1, description="pairs per optimizer step")
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0)
    max_length: int = Field(512, ge=2, description="tokens per text (truncated from the left)")
    seed: int = 0
    output_dir: str | None = Field(
        None, description="default runs/rm/<name>; the checkpoint goes to <output_dir>/model"
    )
    tracking: Tracking = Field(default_factory=Tracking, description="W&B as for runs (job type rm_train)")

    def out_dir(self) -> Path:
        return Path(self.output_dir or Path("runs") / "rm" / self.name)


class PairsConfig(Strict):
    """`zoo rm pairs PAIRS.yaml`: preference pairs from a task with gold answers, sampling the policy."""

    name: str = "pairs"
    model: str = "smollm2-135m-instruct-q4"
    task: dict[str, Any] = Field(description="a task spec, as in a run file (rows with gold answers)")
    judge: Spec = Field("correctness", description="the reward deciding correct (score == 1.0) vs incorrect")
    prompts: int = Field(64, ge=1, description="prompts drawn from the task's training rows")
    samples: int = Field(8, ge=2, description="completions sampled per prompt")
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, description=f"logits / temperature, >= {MIN_TEMPERATURE}")
    length_bias: float | None = Field(
        None,
        ge=0,
        le=1,
        description="fraction of pairs whose chosen completion is the "
        "longer (characters); null: chosen and rejected drawn at random",
    )
    label_noise: float = Field(
        0.0,
        ge=0,
        le=1,
        description="q: a pair whose rejected (incorrect) completion is the "
        "longer is flipped (the longer incorrect preferred) with probability q",
    )
    seed: int = 0
    output: str | None = Field(
        None, description="the JSONL written (default runs/pairs/<name>.jsonl); never overwritten"
    )

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        return sampling_temperature(v)

    def out_path(self) -> Path:
        return Path(self.output or Path("runs") / "pairs" / f"{self.name}.jsonl")


C = TypeVar("C", RMTrainConfig, PairsConfig)


def load_config(path: str | Path, cls: type[C], overrides: dict[str, Any] | None = None) -> C:
    """Read and validate `path` as `cls`; `overrides` are dotted keys (`--set lr=1e-4`). Raises
    VariantError naming the file and the key."""
    from zoo.config.overrides import OverrideError, apply_dotted

    data = read_yaml_mapping(Path(path))
    if overrides:
        try:
            data = apply_dotted(data, overrides, str(path), lambda key: ((), key.split(".")))
        except OverrideError as e:
            raise VariantError(str(e)) from None
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise VariantError(format_validation(e, str(path), cls)) from None
