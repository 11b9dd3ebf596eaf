"""`zoo bench`'s options (the typer declarations `zoo.cli.bench.bench` takes, and `BenchArgs`, their
values in one record) and the option checks that are more than a typer range: --strategy/--nproc
against the mode, and --backend values to generator specs (each raises ValueError naming the option)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

import typer

from zoo.models import EMBEDDED_MODEL

# --------------------------------------------------------------------------- the options, in `zoo bench --help` order

VARIANTS = typer.Argument(None, help="variant to bench (several with --memory); default grpo")
MODEL = typer.Option(EMBEDDED_MODEL, "--model", help="model name, local directory or Hub id")
PROMPTS = typer.Option(8, "--prompts", min=1, help="prompts per step")
GROUP_SIZE = typer.Option(4, "--group-size", min=1, help="completions per prompt")
MAX_NEW_TOKENS = typer.Option(64, "--max-new-tokens", min=1)
STEPS = typer.Option(3, "--steps", min=1, help="measured steps (after the warm-up)")
WARMUP = typer.Option(1, "--warmup", min=1, help="warm-up steps (not measured)")
LORA = typer.Option(
    None,
    "--lora/--full",
    help="LoRA r16 on q,k,v,o or full fine-tuning (default full; --memory runs both unless one is given)",
)
CHECKPOINTING = typer.Option(False, "--checkpointing", help="activation checkpointing in the train forward")
IGNORE_EOS = typer.Option(
    False,
    "--ignore-eos",
    help="every completion runs to --max-new-tokens (cost per token; otherwise completions stop at EOS). Not with --vs",
)
AUTOCAST = typer.Option(
    "auto",
    "--autocast",
    help="auto | bf16 | none (auto: bf16 where the GPU "
    "or CPU runs it natively, else none = fp32; printed). fp16 is not supported",
)
MICRO_BATCH = typer.Option(8, "--micro-batch", min=1, help="completions per forward/backward")
UPDATES = typer.Option(
    None, "--updates", help="EPOCHSxMINIBATCHES per rollout (default: the variant's; 1x1 with --memory)"
)
SET = typer.Option([], "--set", help="slot override, e.g. clip.eps_high=0.3 (repeatable)")
VS = typer.Option(None, "--vs", help="'trl': race TRL's GRPOTrainer at matched settings")
ROUNDS = typer.Option(2, "--rounds", min=1, help="--vs: alternations (zoo/TRL, then TRL/zoo, ...)")
MEMORY = typer.Option(False, "--memory", help="peak memory breakdown per variant, full and LoRA")
REWARD_MODEL = typer.Option(
    None,
    "--reward-model",
    help="also score with this reward model "
    "(a `reward_model` reward: HF id or directory); its weights are a line "
    "of the memory breakdown",
)
SCAN = typer.Option(None, "--scan", help="KEY=V1,V2,...: group_size, max_new_tokens, prompts or micro_batch")
PLOT = typer.Option(None, "--plot", help="--scan: PNG path (default bench-scan-KEY.png)")
TASK = typer.Option(
    None,
    "--task",
    help="task spec as a YAML/JSON mapping or a YAML file "
    "(default: worked 2-shot, 2-term arithmetic with 1-2 digit numbers)",
)
THREADS = typer.Option(
    None,
    "--threads",
    min=1,
    help="torch CPU threads (default: the CPUs this process may use minus other zoo runs' threads)",
)
STRATEGY = typer.Option(
    "single",
    "--strategy",
    help="single | ddp | fsdp (training.strategy; ddp and "
    "fsdp need --nproc N or a launcher): per-rank memory and step time",
)
NPROC = typer.Option(
    None, "--nproc", min=1, help="start N processes of this machine under torchrun (with --strategy ddp or fsdp)"
)
SEED = typer.Option(0, "--seed")
BACKEND = typer.Option(
    [],
    "--backend",
    help="generator(s) to sample with (sampling.backend): a "
    "name, a comma list or repeated for side by side runs, or a YAML mapping "
    "'{name: noisy, sigma: 0.1}'; default hf",
)
ASYNC = typer.Option(
    None,
    "--async",
    help="asynchronous training (docs/guides/async.md): a comma list of max_staleness values k; "
    "benches the synchronous step, then async at each k (thread workers, --async-workers), side by side",
)
ASYNC_WORKERS = typer.Option(2, "--async-workers", min=1, help="rollout workers of each --async run")
AS_JSON = typer.Option(False, "--json", help="print the full result as JSON")
OUT = typer.Option(None, "--out", help="also write the JSON result to this file")


@dataclass
class BenchArgs:
    """The values `zoo bench` was given, one field per option above (`set_` is --set, `scan_` --scan)."""

    variants: Optional[List[str]]
    model: str
    prompts: int
    group_size: int
    max_new_tokens: int
    steps: int
    warmup: int
    lora: Optional[bool]
    checkpointing: bool
    ignore_eos: bool
    autocast: str
    micro_batch: int
    updates: Optional[str]
    set_: List[str]
    vs: Optional[str]
    rounds: int
    memory: bool
    reward_model: Optional[str]
    scan_: Optional[str]
    plot: Optional[Path]
    task: Optional[str]
    threads: Optional[int]
    strategy: str
    nproc: Optional[int]
    seed: int
    backend: List[str]
    async_: Optional[str]
    async_workers: int
    as_json: bool
    out: Optional[Path]

    @property
    def modes(self) -> int:
        """How many of --vs, --memory, --scan were given (at most one may be)."""
        return sum(bool(x) for x in (self.vs, self.memory, self.scan_))


# --------------------------------------------------------------------------- checks


def check_launch(strategy: str, nproc: int | None, launched: bool, modes: int) -> None:
    """Raise ValueError where `--strategy` / `--nproc` cannot run: an unknown strategy, ddp/fsdp
    without --nproc or a launcher, --nproc N > 1 with single, or --nproc with --vs/--memory/--scan
    (their workers are single processes)."""
    from zoo.backends.train.strategy import STRATEGIES

    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if strategy != "single" and nproc is None and not launched:
        raise ValueError(
            f"--strategy {strategy} needs processes: add --nproc N (zoo bench grpo --strategy "
            f"{strategy} --nproc 2) or start it under torchrun"
        )
    if strategy == "single" and (nproc or 1) > 1:
        raise ValueError(
            f"--nproc {nproc} with --strategy single: nothing would combine the ranks' gradients; "
            "add --strategy ddp or fsdp"
        )
    if (nproc is not None or strategy != "single") and modes:
        raise ValueError("--strategy/--nproc bench one configuration: not with --vs, --memory or --scan")


def parse_async(value: Optional[str]) -> list[int]:
    """--async "1,2" -> [1, 2] (each k >= 0); [] when not given. Raises ValueError naming --async."""
    if value is None:
        return []
    try:
        ks = [int(x) for x in str(value).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--async {value!r}: expected a comma list of integers k >= 0, e.g. --async 1,2") from None
    if not ks or any(k < 0 for k in ks):
        raise ValueError(f"--async {value!r}: expected a comma list of integers k >= 0, e.g. --async 1,2")
    if len(set(ks)) < len(ks):
        raise ValueError(f"--async {value!r}: a k repeats; list each once")
    return ks


def check_async_workers(ks: list[int], workers: int, prompts: int) -> None:
    """ValueError naming the flags when --async-workers exceeds what the capacity rule keeps busy at the
    smallest --async k: prompts x (k + 1) groups in flight (async.workers' bound, docs/guides/async.md)."""
    if ks and workers > prompts * (min(ks) + 1):
        k = min(ks)
        raise ValueError(
            f"--async-workers {workers}: at most --prompts x (k + 1) = {prompts} x {k + 1} = {prompts * (k + 1)} "
            f"for --async k = {k} (more workers would only hold idle copies of the policy)"
        )


def parse_backends(values: List[str]) -> list[Any]:
    """--backend values -> generator specs: each value a comma list of names, or one YAML mapping
    ('{name: noisy, sigma: 0.1}'); default ["hf"]. Raises ValueError naming --backend for an empty name,
    a bad mapping or a spec that does not build (unknown names list the known generators)."""
    import yaml

    from zoo.backends.generate.backend import backend_error

    specs: list[Any] = []
    for v in values:
        if v.strip().startswith("{"):
            try:
                m = yaml.safe_load(v)
            except yaml.YAMLError as e:
                raise ValueError(f"--backend {v!r}: not a YAML mapping ({e})") from None
            if not isinstance(m, dict):
                raise ValueError(f"--backend {v!r}: expected a mapping such as '{{name: noisy, sigma: 0.1}}'")
            specs.append(m)
            continue
        names = [x.strip() for x in v.split(",")]
        if not all(names):
            raise ValueError(f"--backend {v!r}: empty name; use e.g. --backend hf,noisy")
        specs += names
    for sp in specs:
        e = backend_error(sp)
        if e:
            raise ValueError(f"--backend: {e.removeprefix('sampling.backend: ')}")
    return specs or ["hf"]
