"""`zoo bench`'s terminal tables: one step's cost per phase, the memory comparison, scans, the TRL race,
the per-rank summary and the decode speed against the machine's bound (zoo/cli/bench.py prints them)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.table import Table

from zoo.cli.common import console


def _f(x: Any, fmt: str = ".2f") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, fmt)


def _gb(mb: Any) -> str:
    return "-" if mb is None else f"{mb / 1024:.2f}"


def _si(x: float) -> str:
    if x is None or math.isnan(x):
        return "-"
    for unit, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f} {unit}"
    return f"{x:.2f}"


def _title(s: dict[str, Any]) -> str:
    return (
        f"{s['variant']} on {Path(str(s['model'])).name}: {s['prompts']} prompts x {s['group_size']} completions, "
        f"{s['max_new_tokens']} new tokens, {'LoRA' if s['lora'] else 'full'}, autocast {s['autocast']}, "
        f"micro-batch {s['micro_batch']}"
        + (", activation checkpointing" if s.get("checkpointing") else "")
        + (", EOS ignored" if s.get("ignore_eos") else "")
        + (f", backend {s['backend']}" if s.get("backend", "hf") != "hf" else "")
    )


def print_bench(res: dict[str, Any]) -> None:
    mem_kind = "CUDA max allocated" if res.get("device", "cpu").startswith("cuda") else "RSS high-water mark"
    t = Table(
        title=_title(res["spec"]) + f"\nmedian of {res['spec']['steps']} steps after {res['spec']['warmup']} warm-up"
    )
    for c in ("phase", "seconds", "share", "tokens", "tokens/s", f"peak GB ({mem_kind})"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    step_s = res["step"]["seconds"]
    names = {
        "forward": "forward (old/ref log-probs, values)",
        "score": "score (rewards)",
        "critic": "  critic (within train)",
    }
    for p, r in res["phases"].items():
        share = r["seconds"] / step_s if step_s > 0 else float("nan")
        t.add_row(
            names.get(p, p),
            _f(r["seconds"], ".3f"),
            f"{share:.0%}" if share == share else "-",
            _f(r["tokens"], ".0f"),
            _f(r["tokens_per_s"], ".0f"),
            _gb(r["peak_mb"]),
        )
    t.add_row(
        "[bold]step",
        f"[bold]{step_s:.3f}",
        "",
        _f(res["step"]["tokens"], ".0f"),
        _f(res["step"]["tokens_per_s"], ".1f"),
        f"[bold]{_gb(res['step']['peak_mb'])}",
    )
    console.print(t)
    fl = res["train_flops"]
    console.print(
        f"train FLOP/s estimate: {flops_per_token(fl)} x {fl['tokens']:.0f} tokens / "
        f"{fl['seconds']:.2f} s = [bold]{_si(fl['flops_per_s'])}FLOP/s[/]",
        highlight=False,
    )
    tr = res["phases"]["train"]
    if tr["tokens"] > 0:
        console.print(
            f"train ran {tr['tokens']:.0f} positions for {tr['real_tokens']:.0f} real prompt + completion "
            f"tokens (x{tr['tokens'] / tr['real_tokens']:.2f}: padding adds, prompts shared by a group count "
            "once)",
            highlight=False,
        )
    m = res["memory"]
    console.print(
        "memory at peak (GB): "
        + ", ".join(
            f"{k.removesuffix('_mb')} {_gb(m[k])}"
            for k in (
                "weights_mb",
                "reward_model_mb",
                "gradients_mb",
                "optimizer_mb",
                "runtime_mb",
                "activations_mb",
                "peak_mb",
            )
            if k != "reward_model_mb" or has_reward_model(res["spec"])
        ),
        highlight=False,
    )
    met = res["metrics"]
    console.print(
        f"reward {_f(met.get('reward/total'), '.3f')}, completion length {_f(met.get('completion/len_mean'), '.1f')}, "
        f"setup {res['setup_s']:.1f} s, torch threads {res['machine']['torch_threads']}, "
        f"CPU s per step {_f(res['step'].get('cpu_s'))}, max load avg {_f(res['step'].get('loadavg_1m'), '.1f')}",
        highlight=False,
    )


def flops_per_token(fl: dict[str, Any]) -> str:
    """The train FLOPs per token of `zoo.bench.run.train_flops` in words: `6 x 134.5M params` when every
    weight trains, `(4 x 136.3M params + 2 x 1.8M trainable)` with frozen weights (LoRA); a result
    written before `trainable` was recorded counts as full fine-tuning."""
    n, t = fl["params"], fl.get("trainable", fl["params"])
    if t == n:
        return f"6 x {n / 1e6:.1f}M params"
    return f"(4 x {n / 1e6:.1f}M params + 2 x {t / 1e6:.1f}M trainable)"


def print_bound(res: dict[str, Any]) -> None:
    """The step near its bound (zoo/bench/phase_bound.py): per phase the measured seconds, the FLOPs and
    bytes of the work it ran, the least time they take at this machine's rates, and the distance."""
    b = res.get("bound")
    if not b:
        return
    t = Table(
        title=f"The step near its bound: matmul {_si(b['matmul_flops_per_s'])}FLOP/s ({b.get('dtype')}), "
        f"copy {_si(b['copy_bytes_per_s'])}B/s"
    )
    for c in ("phase", "measured s", "GFLOP", "GB moved", "bound s", "distance"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    names = {
        "generate": "generate (prefill + decode)",
        "forward": "forward (old/ref log-probs, values)",
        "train": "train (forward + backward, AdamW)",
        "critic": "  critic (within train)",
    }
    for p in ("generate", "forward", "train", "critic", "step"):
        if p not in b:
            continue
        r = b[p]
        t.add_row(
            f"[bold]{p}" if p == "step" else names[p],
            _f(r["seconds"], ".3f"),
            _f(r["flops"] / 1e9, ".1f"),
            _f(r["bytes"] / 1e9, ".2f"),
            _f(r["bound_s"], ".3f"),
            _f(r["distance"], ".1f") + ("x" if r["distance"] == r["distance"] else ""),
        )
    console.print(t)


def has_reward_model(spec: dict[str, Any]) -> bool:
    """Whether a bench spec (`BenchSpec` as a dict) scores with a `reward_model` reward (a model whose
    weights are a line of the memory breakdown)."""
    return any(isinstance(r, dict) and r.get("name") == "reward_model" for r in spec.get("rewards", []))


def print_memory(res: dict[str, Any]) -> None:
    s = res["spec"]
    t = Table(
        title="Peak memory and step time per variant (each in its own process)\n"
        f"{s['prompts']} prompts x {s['group_size']} completions, {s['max_new_tokens']} new tokens, "
        f"autocast {s['autocast']}, micro-batch {s['micro_batch']}, updates {s['updates'] or 'per variant'}"
    )
    rm = has_reward_model(s)  # the "reward model" column only where a reward model is loaded
    for c in (
        "variant",
        "mode",
        "step s",
        "train s",
        "peak GB",
        "weights",
        *(("reward model",) if rm else ()),
        "grads",
        "optimizer",
        "runtime",
        "activations",
        f"vs {res.get('baseline')}",
    ):
        t.add_column(c, justify="left" if c in ("variant", "mode") else "right")
    for r in res["rows"]:
        ratio = res["ratio_to_first"].get(r["mode"], {}).get(r["variant"])
        t.add_row(
            r["variant"],
            r["mode"],
            _f(r["step_s"]),
            _f(r["phases"].get("train")),
            _gb(r["peak_mb"]),
            _gb(r["weights_mb"]),
            *((_gb(r.get("reward_model_mb")),) if rm else ()),
            _gb(r["gradients_mb"]),
            _gb(r["optimizer_mb"]),
            _gb(r["runtime_mb"]),
            _gb(r["activations_mb"]),
            _f(ratio),
        )
    console.print(t)


def print_scan(res: dict[str, Any], plot: Path | None) -> None:
    t = Table(
        title=f"Scan of {res['key']} (*)\n{_title({**res['spec'], res['key']: '*'})}",
        caption="seconds per phase (median); act.: activations at the peak; tok: tokens per step",
    )
    for c in (
        res["key"],
        "step s",
        "gen s",
        "fwd s",
        "score s",
        "train s",
        "peak GB",
        "act. GB",
        "gen tok",
        "train tok",
        "len",
    ):
        t.add_column(c, justify="right")
    for p in res["points"]:
        ph = p["phases"]
        t.add_row(
            str(p["value"]),
            _f(p["step_s"]),
            _f(ph["generate"]),
            _f(ph["forward"]),
            _f(ph["score"]),
            _f(ph["train"]),
            _gb(p["peak_mb"]),
            _gb(p["memory"]["activations_mb"]),
            _f(p["gen_tokens"], ".0f"),
            _f(p["train_tokens"], ".0f"),
            _f(p["len_mean"], ".1f"),
        )
    console.print(t)
    if plot:
        console.print(f"plot: {plot}")


def print_vs(res: dict[str, Any]) -> None:
    s = res["spec"]
    t = Table(
        title=f"zoo vs TRL {res['rounds']['trl'][0].get('trl_version', '')} GRPOTrainer (alternating, each in its "
        f"own process)\n{_title(s | {'variant': 'matched GRPO (TRL loss_type dapo)'})}"
    )
    t.caption = (
        "step s: median over the measured steps; CPU s: process CPU seconds per step; "
        "len: mean completion tokens; load: highest 1-min load average"
    )
    for c in ("", "step s", "CPU s", "steps", "peak GB", "len", "reward", "load"):
        t.add_column(c, justify="left" if c == "" else "right")
    for side in ("zoo", "trl"):
        r = res[side]
        t.add_row(
            side,
            _f(r["step_s"]),
            _f(r.get("cpu_s")),
            str(len(r["step_times"])),
            _gb(r["peak_mb"]),
            _f(r["len_mean"], ".1f"),
            _f(r["reward"], ".3f"),
            _f(r.get("loadavg_1m"), ".1f"),
        )
    console.print(t)
    console.print(
        f"zoo / TRL: step time [bold]{res['ratio']['step_time']:.2f}[/], "
        f"peak memory [bold]{res['ratio']['peak_mem']:.2f}[/]",
        highlight=False,
    )


def print_ranks(res: dict[str, Any]) -> None:
    """The per-rank table of `zoo bench --strategy ddp|fsdp --nproc N` (zoo/bench/ranks.py)."""
    d = res["distributed"]
    mem_kind = "CUDA max allocated" if res.get("device", "cpu").startswith("cuda") else "RSS high-water mark"
    t = Table(
        title=_title(res["spec"]) + f"\nstrategy {d['strategy']} on {d['world_size']} processes; median of "
        f"{res['spec']['steps']} steps after {res['spec']['warmup']} warm-up; GB per rank ({mem_kind})"
    )
    for c in ("rank", "step s", "peak", "weights", "grads", "optim", "w+g+o", "activ"):
        t.add_column(c, justify="right")
    for r in d["ranks"]:
        t.add_row(
            str(r["rank"]),
            _f(r.get("wall_s")),
            _gb(r["peak_mb"]),
            _gb(r["weights_mb"]),
            _gb(r["gradients_mb"]),
            _gb(r["optimizer_mb"]),
            _gb(r["state_mb"]),
            _gb(r["activations_mb"]),
        )
    t.caption = (
        "step s: this rank's wall time per step (median); w+g+o: weights + gradients + optimizer state the "
        "rank holds (FSDP2: its shards); activ: peak - w+g+o - runtime"
    )
    console.print(t)
    console.print(
        "runtime (before the models loaded) GB: "
        + ", ".join(f"rank {r['rank']} {_gb(r['runtime_mb'])}" for r in d["ranks"])
        + "; trainer's time/train (mean over ranks): "
        f"{d['ranks'][0]['train_s']:.2f} s",
        highlight=False,
    )
    console.print(
        f"weights + gradients + optimizer state summed over ranks: {_gb(d['state_sum_mb'])} GB; "
        f"largest peak {_gb(d['peak_max_mb'])} GB; slowest median step {d['step_max_s']:.2f} s",
        highlight=False,
    )


def print_decode(results: list[dict[str, Any]]) -> None:
    """The decode table: per backend, the generator's start-up seconds, the training step's and the sync's
    seconds, generation tokens/s, decode steps/s and time per decode step next to the bound
    (`zoo.bench.bound`) and the distance."""
    rates = "; ".join(
        f"{_si(r['decode']['matmul_flops_per_s'])}FLOP/s ({r['decode']['dtype']}), "
        f"{_si(r['decode']['copy_bytes_per_s'])}B/s, {_f(r['decode']['rows_per_step'], '.0f')} x "
        f"{_f(r['decode']['ctx_mean'], '.0f')}"
        for r in results
    )
    t = Table(
        title="Decode speed against this machine's bound (zoo.bench.bound; docs/results/performance-decode.md)",
        caption="bound = max(FLOPs / matmul rate, bytes / copy bandwidth) per decode step; per row, measured "
        f"in its run: matmul rate, copy bandwidth (read + written), rows x mean attended positions per "
        f"step: {rates}; distance = measured / bound time, generate phase incl. prefill",
    )
    t.caption += (
        "; start-up: the generator's (vLLM's engine, in the warm-up step); sync: time/sync, the policy's "
        "weights reaching the generator (part of train); '-' distance: the generator runs its own model "
        "copy (vLLM), whose decode steps the bench does not count"
    )
    for c in (
        "backend",
        "start-up s",
        "step s",
        "sync s",
        "gen tok/s",
        "decode steps/s",
        "ms/step",
        "bound tok/s",
        "bound steps/s",
        "limit",
        "distance",
    ):
        t.add_column(c, justify="left" if c in ("backend", "limit") else "right")
    for r in results:
        d, b = r["decode"], r["spec"].get("backend", "hf")
        t.add_row(
            b if isinstance(b, str) else json.dumps(b),
            _f(r.get("generator", {}).get("startup_s"), ".1f"),
            _f(r["step"]["seconds"], ".2f"),
            _f(r["step"].get("sync_s"), ".3f"),
            _f(d["tokens_per_s"], ".1f"),
            _f(d["steps_per_s"], ".2f"),
            _f(d["step_seconds"] * 1e3, ".1f"),
            _f(d["bound_tokens_per_s"], ".0f"),
            _f(d["bound_steps_per_s"], ".1f"),
            d["limit"] or "-",
            _f(d["distance"], ".1f") + "x" if d["distance"] == d["distance"] else "-",
        )
    console.print(t)


def print_async(runs: list[dict[str, Any]]) -> None:
    """`zoo bench --async`: per run (synchronous first) the median seconds per step, samples (completions)
    per second, the staleness reached, the trainer's wait for the workers (`time/wait_workers`) and the
    workers' generate seconds per step summed over groups (`async/generate_s`)."""
    t = Table(title="synchronous vs asynchronous (medians over the measured steps)")
    for c in ("run", "s/step", "samples/s", "staleness mean", "wait workers s", "worker generate s"):
        t.add_column(c, justify="left" if c == "run" else "right")
    for r in runs:
        sp, m = r["spec"], r["metrics"]
        k = sp.get("max_staleness")
        label = "sync" if k is None else f"async k={k} x{sp.get('async_workers')}"
        sec = r["step"]["seconds"]
        samples = sp["prompts"] * sp["group_size"] / sec if sec > 0 else float("nan")
        t.add_row(
            label,
            _f(sec),
            _f(samples, ".1f"),
            _f(m.get("async/staleness_mean", 0.0)),
            _f(m.get("time/wait_workers", 0.0)),
            _f(m.get("async/generate_s", 0.0)),
        )
    console.print(t)
