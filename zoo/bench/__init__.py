"""`zoo bench`: what one training step costs, phase by phase, and how it compares.

    res = run_bench(BenchSpec(variant="grpo", prompts=8, group_size=4, max_new_tokens=64, steps=3))
    res["phases"]["train"]["seconds"], res["train_flops"]["flops_per_s"], res["memory"]["peak_mb"]

One bench = `zoo.run.trainer.setup` + one warm-up `zoo.step.pipeline.step` + `steps` measured ones (no checkpoints,
evaluation or tracking). Per phase it reports the median seconds, the tokens the phase handled,
tokens/s and the phase's peak memory:

    generate   sampling the completions          tokens = completion tokens generated (to EOS)
    forward    old/reference log-probs, values   tokens = positions through the model (prompt+completion)
    score      rewards, length shaping, filters  tokens = completion tokens scored
    advantage  KL-in-reward, estimator, normaliser
    train      every optimizer step of the rollout (forward + backward + AdamW), critic included
    critic     the critic's share of `train` (forward, loss + backward; PPO-style variants only)

Seconds come from the trainer's own `time/*` metrics (the critic's from the probe); memory and token
counts from the probe (zoo/bench/probe.py), which the bench passes to `pipeline.step` as its hooks
(zoo/step/hooks.py: the step opens a phase per stage and a context per model forward; nothing of the
step is replaced), plus forward pre-hooks on the models that count positions. Peak memory per phase
is exact: on Linux freed heap pages are handed back (`malloc_trim`) and the kernel's resident-set
high-water mark is reset at each phase start (`/proc/self/clear_refs` <- 5) and read at its end
(VmHWM); on a GPU it is
`torch.cuda.reset_peak_memory_stats` / `max_memory_allocated`. Where the high-water mark cannot be
reset the numbers are the process peak so far (`memory.peak_resettable` false).

Train-phase FLOP/s estimate: (4 x params + 2 x trainable) x tokens / seconds, params = the policy's
parameters, trainable = those that get a gradient (6 x params in full fine-tuning, ~4 x with LoRA's
frozen base: `zoo.bench.run.train_flops`, Kaplan et al. 2020 section 2.1), + the same of the critic's
x its positions with a critic; tokens = prompt + completion positions through the training
forward/backward as run (padding inside a trimmed micro-batch included: it is computed).

`tokens` of forward/train/critic = positions the models actually ran (forward pre-hooks on policy,
reference and critic count `input_ids`); with prompt sharing
(`zoo.step.logprobs.token_logprobs(share_prompts=True)`) a group's prompt counts once, not G times;
`real_tokens` = the non-padding prompt + completion tokens of the rows (what a forward without
sharing or padding would run). Each step also records CPU seconds (all threads) and the 1-minute
load average, so runs disturbed by other jobs show.

Decode (`decode`, zoo/bench/decode.py, bound.py): generation tokens/s and decode steps/s of the
generate phase (decode steps = one-token forwards of the policy's transformers model, counted by the
probe), next to the machine's bound max(FLOPs / matmul rate, bytes / copy bandwidth) over those steps
(FLOPs = 2 x params x rows + attention, bytes = weights + KV cache read; the two rates measured at
bench time) and the distance = measured / bound time. `BenchSpec.backend` is `sampling.backend`.
A generator that runs its own copy of the model (vLLM) makes no one-token forwards of the policy
module: its decode steps and distance are NaN, its tokens/s stand. `generator.startup_s`: the
generator's start-up (vLLM's engine, started in the warm-up step; 0 for `hf`); `step.sync_s`: the
median `time/sync` (the policy's weights reaching the generator; part of `train`).

The step near its bound (`bound`, phase_bound.py): per phase (generate, forward, train, critic, and the
step) the FLOPs of every forward and backward the probe saw (positions, LM-head positions and attended
positions per model and grad mode; a frozen weight's backward ~1x its forward, a trainable one's 2x),
prefill and decode in generate (the decode bound above), AdamW's bytes in train, at the decode row's
matmul rate and copy bandwidth: bound seconds and distance = measured / bound.

Memory breakdown (`memory`): weights (every parameter and buffer of policy, reference copy and
critic), gradients (trainable parameters), optimizer state (the AdamW tensors actually allocated),
runtime (resident memory of the process before the models loaded: Python, torch, tokenizer, task)
and activations = measured peak - all of those (activations, logits, KV cache, allocator slack).

Comparisons (`compare_memory`, `scan`, `vs_trl`) run each configuration in its own subprocess
(`python -m zoo.bench SPEC.json OUT.json`, `python -m zoo.bench.trl ...`) so that every number is
that process's own peak. Set `ZOO_BENCH_LOCK=/path/to/lockfile` to run each worker under
`flock` (serialises benchmark workers with other heavy jobs on a shared machine).

Data-parallel benches (`zoo bench grpo --strategy ddp|fsdp --nproc N`, `ranks.bench_ranks`): every rank
runs `run_bench` with `training.strategy` set, under `torchrun` (zoo/cli/launch.py), and measures its
own process; weights, gradients and optimizer state count the tensors the rank holds (an FSDP2
DTensor its local shard, `to_local()`); rank 0 gathers every rank's row and prints the table.

The package, a module a job: spec.py (BenchSpec, run_config), probe.py (the hooks), run.py (run_bench,
the worker), decode.py and bound.py (the decode row and its bound; the FLOP counts), phase_bound.py (the step's bound per phase), memory.py, machine.py, workers.py
(subprocesses), precheck.py (variants, rewards and the reward-model path checked before any worker;
a failed worker's exception as one line), compare.py (compare_memory, scan, vs_trl), plots.py (plot_scan), trl.py (TRL's side,
imported only by vs_trl and its worker), ranks.py (bench_ranks: the per-rank bench under a launcher).
"""

from __future__ import annotations

from zoo.bench.compare import SCAN_KEYS, compare_memory, parse_scan, scan, vs_trl
from zoo.bench.machine import cpu_seconds, machine_info, versions
from zoo.bench.memory import memory_breakdown, rss_mb
from zoo.bench.plots import plot_scan
from zoo.bench.probe import Probe, attach
from zoo.bench.run import run_bench, summarize, train_flops
from zoo.bench.spec import (
    BENCH_LORA,
    BENCH_REWARDS,
    BENCH_TASK,
    TRL_MATCHED_VARIANT,
    BenchSpec,
    parse_updates,
    resolve_bench_autocast,
    run_config,
)
from zoo.bench.workers import bench_in_subprocess, run_worker
from zoo.step.hooks import PHASES

__all__ = [
    "BENCH_LORA",
    "BENCH_REWARDS",
    "BENCH_TASK",
    "PHASES",
    "SCAN_KEYS",
    "TRL_MATCHED_VARIANT",
    "BenchSpec",
    "Probe",
    "attach",
    "bench_in_subprocess",
    "compare_memory",
    "cpu_seconds",
    "machine_info",
    "memory_breakdown",
    "parse_scan",
    "parse_updates",
    "plot_scan",
    "resolve_bench_autocast",
    "rss_mb",
    "run_bench",
    "run_config",
    "run_worker",
    "scan",
    "summarize",
    "train_flops",
    "versions",
    "vs_trl",
]
