"""TRL's side of `zoo bench --vs trl`: GRPOTrainer on the same model, prompts, rewards and settings.

Run by `zoo.bench.vs_trl` as a worker process (`python -m zoo.bench.trl SPEC.json OUT.json`), so the
peak memory it reports is TRL's alone. Needs the optional extra: `pip install 'variant-zoo[bench]'`
(or `pip install trl`); `trl` is imported only here, and only inside the worker.

How the two sides are matched (`trl_spec`):

| zoo (registry/trl_grpo_matched.yaml, 1x1)   | TRL GRPOConfig                                             |
|---------------------------------------------|------------------------------------------------------------|
| advantage group_mean, normalizer group_std  | scale_rewards="group" (std eps 1e-4 in TRL, 1e-6 in zoo)    |
| clip ppo eps 0.2                            | epsilon=0.2, epsilon_high=0.2                              |
| aggregate token_mean                        | loss_type="dapo" (sum over the step's tokens / their count) |
| kl none                                     | beta=0.0 (no reference model is built)                     |
| updates 1 epoch x 1 minibatch, on-policy     | num_iterations=1, steps_per_generation = grad. accumulation |
| prompts x group_size completions per step    | num_generations=G, generation batch = prompts x G          |
| micro_batch rows per forward/backward        | per_device_train_batch_size=micro_batch, accumulation N/mb |
| max_new_tokens, temperature 1, top_p 1       | max_completion_length, temperature 1, top_p 1, top_k 0     |
| rewards correctness + 0.5 format (zoo fns)   | the same zoo functions as reward_funcs, reward_weights     |
| AdamW lr, betas (0.9, 0.999), wd 0, clip 1.0 | learning_rate, adam betas, weight_decay 0, max_grad_norm 1 |
| constant lr, no warm-up                      | lr_scheduler_type="constant"                               |
| autocast bf16 / none                         | bf16=True / bf16=False (fp32)                              |
| LoRA r16 a32 q,k,v,o (--lora)                | peft_config = the same LoraConfig                          |
| activation checkpointing off (--checkpointing on) | gradient_checkpointing=False/True (TRL's default: True) |
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zoo.bench.machine import cpu_seconds
from zoo.bench.spec import BENCH_LORA

INSTALL_HINT = "TRL is not installed: pip install 'variant-zoo[bench]'  (or: pip install trl)"


def trl_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("trl") is not None


def trl_spec(spec: Any) -> dict[str, Any]:
    """The TRL worker's input for a `zoo.bench.BenchSpec` (the GRPOConfig keys are spelled out)."""
    n = spec.prompts * spec.group_size
    mb = spec.micro_batch if n % spec.micro_batch == 0 else n
    grpo = {
        "per_device_train_batch_size": mb,
        "gradient_accumulation_steps": n // mb,
        "num_generations": spec.group_size,
        "max_completion_length": spec.max_new_tokens,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.0,
        "loss_type": "dapo",
        "scale_rewards": "group",
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "beta": 0.0,
        "num_iterations": 1,
        "mask_truncated_completions": False,
        "learning_rate": spec.lr,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "max_grad_norm": 1.0,
        "bf16": spec.autocast == "bf16",
        "fp16": False,
        "gradient_checkpointing": spec.checkpointing,
        "max_steps": spec.warmup + spec.steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "seed": spec.seed,
        "dataloader_num_workers": 0,
        "log_completions": False,
    }
    return {
        "model": spec.model,
        "task": spec.task,
        "rewards": spec.rewards,
        "lora": dict(BENCH_LORA) if spec.lora else None,
        "warmup": spec.warmup,
        "steps": spec.steps,
        "threads": spec.threads,
        "grpo": grpo,
    }


def run_trl(d: dict[str, Any]) -> dict[str, Any]:
    """Train `warmup + steps` GRPOTrainer steps; per measured step: seconds and peak memory."""
    import torch

    if d.get("threads"):
        torch.set_num_threads(int(d["threads"]))
    try:
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SystemExit(f"{INSTALL_HINT}\n({e})") from e

    from zoo.models import lora_config
    from zoo.rewards.compute import resolve_rewards

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model, tok, ds = _model_and_data(d)
    rewards = resolve_rewards(d["rewards"])
    timer = _timer(device)
    with tempfile.TemporaryDirectory(prefix="zoo-bench-trl-") as tmp:
        args = GRPOConfig(
            output_dir=tmp, use_cpu=device.type == "cpu", reward_weights=[w for _, w in rewards], **d["grpo"]
        )
        trainer = GRPOTrainer(
            model=model,
            args=args,
            processing_class=tok,
            train_dataset=ds,
            reward_funcs=[_trl_reward(c) for c, _ in rewards],
            peft_config=lora_config(d["lora"]) if d.get("lora") else None,
            callbacks=[timer],
        )
        trainer.train()
    return _summary(timer, int(d["warmup"]))


def _model_and_data(d: dict[str, Any]):
    """(fp32 model, prepared tokenizer, a datasets.Dataset of {prompt, row}: the task row as JSON)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from zoo.models import prepare_tokenizer, resolve_model
    from zoo.tasks import load_task

    src = resolve_model(d["model"])
    tok = prepare_tokenizer(AutoTokenizer.from_pretrained(src.path))
    model = AutoModelForCausalLM.from_pretrained(src.path, dtype=torch.float32)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tok.pad_token_id
    task = load_task(d["task"])
    ds = Dataset.from_list(
        [{"prompt": r["prompt"], "row": json.dumps({k: v for k, v in r.items() if k != "prompt"})} for r in task.train]
    )
    return model, tok, ds


def _trl_reward(comp):
    """A zoo reward as a TRL reward function (completions as text, the task row from the `row` column)."""

    def reward(prompts=None, completions=None, row=None, **_kw):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rows = [json.loads(r) for r in row]
        return [None if v is None else float(v) for v in comp(texts, rows)]

    reward.__name__ = comp.name
    return reward


def _timer(device):
    """A TrainerCallback recording each step's seconds, peak memory, CPU seconds and load, and the reward logs."""
    from transformers import TrainerCallback

    from zoo.backends.train.memory import peak_memory_mb, reset_peak_memory

    class Timer(TrainerCallback):
        def __init__(self):
            self.t0 = 0.0
            self.steps: list[dict[str, float]] = []
            self.logs: list[dict[str, float]] = []

        def on_step_begin(self, args, state, control, **kw):
            reset_peak_memory(device)
            self.load0, self.c0 = os.getloadavg()[0], cpu_seconds()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.steps.append(
                {
                    "seconds": time.perf_counter() - self.t0,
                    "peak_mb": peak_memory_mb(device),
                    "cpu_s": cpu_seconds() - self.c0,
                    "loadavg_1m": max(self.load0, os.getloadavg()[0]),
                }
            )

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                self.logs.append({k: float(v) for k, v in logs.items() if isinstance(v, (int, float))})

    return Timer()


def _summary(timer, warmup: int) -> dict[str, Any]:
    """The measured steps (after `warmup`): times, peak memory, CPU seconds, load, median length and reward."""
    import statistics

    import trl

    measured, logs = timer.steps[warmup:], timer.logs[warmup:]

    def med(xs):
        xs = [x for x in xs if x == x]
        return float(statistics.median(xs)) if xs else float("nan")

    return {
        "step_times": [s["seconds"] for s in measured],
        "peak_mb": max(s["peak_mb"] for s in measured),
        "cpu_s": [s["cpu_s"] for s in measured],
        "loadavg_1m": max(s["loadavg_1m"] for s in measured),
        "len_mean": med([g.get("completions/mean_length", float("nan")) for g in logs]),
        "reward": med([g.get("reward", float("nan")) for g in logs]),
        "trl_version": trl.__version__,
        "logs": logs,
    }


def _main(argv: list[str]) -> int:
    d = json.loads(Path(argv[0]).read_text())
    res = run_trl(d)
    Path(argv[1]).write_text(json.dumps(res, default=str))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(_main(sys.argv[1:]))


__all__ = ["INSTALL_HINT", "run_trl", "trl_available", "trl_spec"]
