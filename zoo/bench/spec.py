"""What one bench runs: `BenchSpec` (JSON-serialisable, the workers receive it as a file), the task,
rewards and LoRA it uses by default, and the `RunConfig` it trains with (`run_config`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

#: the task of experiments/quickstart.yaml: 2-term +/- arithmetic, 1-2 digits, worked 2-shot prompts
BENCH_TASK: dict[str, Any] = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "config": {
        "min_terms": 2,
        "max_terms": 2,
        "min_digits": 1,
        "max_digits": 2,
        "operators": ["+", "-"],
        "allow_negation": False,
        "allow_parentheses": False,
    },
    "size": 512,
    "eval_size": 4,
    "fewshot": 2,
    "fewshot_answer": "{expression} = {answer}. The answer is \\boxed{{answer}}.",
}
BENCH_REWARDS: list[Any] = ["correctness", {"name": "format", "weight": 0.5}]
#: LoRA of experiments/quickstart.yaml
BENCH_LORA = {"r": 16, "alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
#: zoo's side of `--vs trl` (TRL GRPOTrainer: loss_type "dapo", scale_rewards "group", epsilon 0.2,
#: beta 0, num_iterations 1): a registry variant, so `zoo show` / `zoo diff grpo trl_grpo_matched` show it.
TRL_MATCHED_VARIANT = "trl_grpo_matched"


@dataclass
class BenchSpec:
    """One benchmark configuration (JSON-serialisable: workers receive it as a file)."""

    variant: str = "grpo"
    model: str = "smollm2-135m-instruct-q4"
    prompts: int = 8
    group_size: int = 4
    max_new_tokens: int = 64
    steps: int = 3
    warmup: int = 1
    lora: bool = False
    checkpointing: bool = False  # activation (gradient) checkpointing
    ignore_eos: bool = False  # every completion runs to max_new_tokens
    autocast: str = "none"  # the concrete choice (none | bf16), `auto` resolved (resolve_bench_autocast)
    autocast_setting: str | None = None  # what was asked: "auto" makes the run resolve it too and say why
    micro_batch: int = 8
    updates: str | None = None  # "EPOCHSxMINIBATCHES"; None: the variant's own
    sets: dict[str, Any] = field(default_factory=dict)  # slot overrides, as `zoo run --set set.X=...`
    seed: int = 0
    backend: Any = "hf"  # sampling.backend: a generator name or {name, params}
    threads: int | None = None
    strategy: str = "single"  # training.strategy (zoo/backends/train/strategy.py); ddp/fsdp run under a launcher
    max_staleness: int | None = None  # async: {max_staleness: k} (docs/guides/async.md); None: the synchronous step
    async_workers: int = 2  # async.workers (thread workers)
    lr: float = 1e-5
    task: dict[str, Any] = field(default_factory=lambda: dict(BENCH_TASK))
    rewards: list[Any] = field(default_factory=lambda: list(BENCH_REWARDS))

    def label(self) -> str:
        return (
            f"{self.variant} {'lora' if self.lora else 'full'} {self.autocast}"
            + (" checkpointing" if self.checkpointing else "")
            + (f" {self.strategy}" if self.strategy != "single" else "")
            + ("" if self.backend == "hf" else f" backend {self.backend}")
            + ("" if self.max_staleness is None else f" async k={self.max_staleness} x{self.async_workers}")
        )


def parse_updates(text: str | None) -> dict[str, int] | None:
    """ "1x1" -> {"epochs": 1, "minibatches": 1}; None -> None. Raises ValueError (one line naming --updates)
    for another form or a count below 1."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not m:
        raise ValueError(f"--updates {text!r}: expected EPOCHSxMINIBATCHES, e.g. 1x1")
    epochs, minibatches = int(m.group(1)), int(m.group(2))
    if epochs < 1 or minibatches < 1:
        raise ValueError(f"--updates {text}: EPOCHS and MINIBATCHES must be >= 1")
    return {"epochs": epochs, "minibatches": minibatches}


def resolve_bench_autocast(setting: str) -> tuple[str, str]:
    """`zoo.run.precision.resolve_autocast` for the device a bench runs on (CUDA if available, else CPU):
    (choice, reason). The spec then carries the concrete choice, so TRL's side and the recorded JSON
    match zoo's. Raises ValueError for an unknown setting."""
    import torch

    from zoo.run.precision import resolve_autocast

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return resolve_autocast(setting, device)


def run_config(spec: BenchSpec, out_dir: str | os.PathLike):
    """The RunConfig a bench trains with (warm-up + measured steps; no eval, no tracking)."""
    from zoo.config.run import RunConfig

    data: dict[str, Any] = {
        "name": f"bench-{spec.variant}",
        "variant": spec.variant,
        "set": dict(spec.sets),
        "model": spec.model,
        "model_opts": {
            "autocast": "auto" if spec.autocast_setting == "auto" else spec.autocast,
            "lora": dict(BENCH_LORA) if spec.lora else None,
            "gradient_checkpointing": spec.checkpointing,
        },
        "task": dict(spec.task),
        "rewards": list(spec.rewards),
        "budget": {
            "steps": spec.warmup + spec.steps,
            "prompts_per_step": spec.prompts,
            "group_size": spec.group_size,
            "max_new_tokens": spec.max_new_tokens,
            "micro_batch": spec.micro_batch,
        },
        "optim": {"lr": spec.lr},
        "sampling": {"ignore_eos": bool(spec.ignore_eos), "backend": spec.backend},
        "eval": {"enabled": False},
        "training": {"strategy": spec.strategy},
        "tracking": {"wandb": False},
        "seed": spec.seed,
        "output_dir": str(out_dir),
    }
    if spec.max_staleness is not None:
        data["async"] = {"max_staleness": spec.max_staleness, "workers": spec.async_workers}
    upd = parse_updates(spec.updates)
    if upd is not None:
        data["budget"]["updates"] = upd
    return RunConfig.model_validate(data)
