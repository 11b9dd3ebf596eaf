"""`zoo bench` (registered on `zoo.cli.common.app`): step cost per phase, TRL race, memory, scaling scans."""
from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.table import Table

from zoo.cli.common import app, console, err, fail, parse_sets, quiet_logs
from zoo.models import EMBEDDED_MODEL


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
    return (f"{s['variant']} on {Path(str(s['model'])).name}: {s['prompts']} prompts x {s['group_size']} completions, "
            f"{s['max_new_tokens']} new tokens, {'LoRA' if s['lora'] else 'full'}, autocast {s['autocast']}, "
            f"micro-batch {s['micro_batch']}" + (", activation checkpointing" if s.get("checkpointing") else "")
            + (", EOS ignored" if s.get("ignore_eos") else "")
            + (f", backend {s['backend']}" if s.get("backend", "hf") != "hf" else ""))


def print_bench(res: dict[str, Any]) -> None:
    mem_kind = "CUDA max allocated" if res.get("device", "cpu").startswith("cuda") else "RSS high-water mark"
    t = Table(title=_title(res["spec"]) + f"\nmedian of {res['spec']['steps']} steps after {res['spec']['warmup']} warm-up")
    for c in ("phase", "seconds", "share", "tokens", "tokens/s", f"peak GB ({mem_kind})"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    step_s = res["step"]["seconds"]
    names = {"forward": "forward (old/ref log-probs, values)", "score": "score (rewards)",
             "critic": "  critic (within train)"}
    for p, r in res["phases"].items():
        share = r["seconds"] / step_s if step_s > 0 else float("nan")
        t.add_row(names.get(p, p), _f(r["seconds"], ".3f"), f"{share:.0%}" if share == share else "-",
                  _f(r["tokens"], ".0f"), _f(r["tokens_per_s"], ".0f"), _gb(r["peak_mb"]))
    t.add_row("[bold]step", f"[bold]{step_s:.3f}", "", _f(res["step"]["tokens"], ".0f"),
              _f(res["step"]["tokens_per_s"], ".1f"), f"[bold]{_gb(res['step']['peak_mb'])}")
    console.print(t)
    fl = res["train_flops"]
    console.print(f"train FLOP/s estimate: 6 x {fl['params'] / 1e6:.1f}M params x {fl['tokens']:.0f} tokens / "
                  f"{fl['seconds']:.2f} s = [bold]{_si(fl['flops_per_s'])}FLOP/s[/]", highlight=False)
    tr = res["phases"]["train"]
    if tr["tokens"] > 0:
        console.print(f"train ran {tr['tokens']:.0f} positions for {tr['real_tokens']:.0f} real prompt + completion "
                      f"tokens (x{tr['tokens'] / tr['real_tokens']:.2f}: padding adds, prompts shared by a group count "
                      "once)", highlight=False)
    m = res["memory"]
    console.print("memory at peak (GB): " + ", ".join(
        f"{k.removesuffix('_mb')} {_gb(m[k])}" for k in ("weights_mb", "reward_model_mb", "gradients_mb", "optimizer_mb",
                                                         "runtime_mb", "activations_mb", "peak_mb")), highlight=False)
    met = res["metrics"]
    console.print(f"reward {_f(met.get('reward/total'), '.3f')}, completion length {_f(met.get('completion/len_mean'), '.1f')}, "
                  f"setup {res['setup_s']:.1f} s, torch threads {res['machine']['torch_threads']}, "
                  f"CPU s per step {_f(res['step'].get('cpu_s'))}, max load avg {_f(res['step'].get('loadavg_1m'), '.1f')}",
                  highlight=False)


def print_memory(res: dict[str, Any]) -> None:
    s = res["spec"]
    t = Table(title="Peak memory and step time per variant (each in its own process)\n"
                    f"{s['prompts']} prompts x {s['group_size']} completions, {s['max_new_tokens']} new tokens, "
                    f"autocast {s['autocast']}, micro-batch {s['micro_batch']}, updates {s['updates'] or 'per variant'}")
    for c in ("variant", "mode", "step s", "train s", "peak GB", "weights", "reward model", "grads", "optimizer",
              "runtime", "activations", f"vs {res.get('baseline')}"):
        t.add_column(c, justify="left" if c in ("variant", "mode") else "right")
    for r in res["rows"]:
        ratio = res["ratio_to_first"].get(r["mode"], {}).get(r["variant"])
        t.add_row(r["variant"], r["mode"], _f(r["step_s"]), _f(r["phases"].get("train")), _gb(r["peak_mb"]),
                  _gb(r["weights_mb"]), _gb(r.get("reward_model_mb")), _gb(r["gradients_mb"]), _gb(r["optimizer_mb"]), _gb(r["runtime_mb"]),
                  _gb(r["activations_mb"]), _f(ratio))
    console.print(t)


def print_scan(res: dict[str, Any], plot: Path | None) -> None:
    t = Table(title=f"Scan of {res['key']} (*)\n{_title({**res['spec'], res['key']: '*'})}",
              caption="seconds per phase (median); act.: activations at the peak; tok: tokens per step")
    for c in (res["key"], "step s", "gen s", "fwd s", "score s", "train s", "peak GB", "act. GB",
              "gen tok", "train tok", "len"):
        t.add_column(c, justify="right")
    for p in res["points"]:
        ph = p["phases"]
        t.add_row(str(p["value"]), _f(p["step_s"]), _f(ph["generate"]), _f(ph["forward"]), _f(ph["score"]),
                  _f(ph["train"]), _gb(p["peak_mb"]), _gb(p["memory"]["activations_mb"]), _f(p["gen_tokens"], ".0f"),
                  _f(p["train_tokens"], ".0f"), _f(p["len_mean"], ".1f"))
    console.print(t)
    if plot:
        console.print(f"plot: {plot}")


def print_vs(res: dict[str, Any]) -> None:
    s = res["spec"]
    t = Table(title=f"zoo vs TRL {res['rounds']['trl'][0].get('trl_version', '')} GRPOTrainer (alternating, each in its "
                    f"own process)\n{_title(s | {'variant': 'matched GRPO (TRL loss_type dapo)'})}")
    t.caption = ("step s: median over the measured steps; CPU s: process CPU seconds per step; "
                 "len: mean completion tokens; load: highest 1-min load average")
    for c in ("", "step s", "CPU s", "steps", "peak GB", "len", "reward", "load"):
        t.add_column(c, justify="left" if c == "" else "right")
    for side in ("zoo", "trl"):
        r = res[side]
        t.add_row(side, _f(r["step_s"]), _f(r.get("cpu_s")), str(len(r["step_times"])), _gb(r["peak_mb"]),
                  _f(r["len_mean"], ".1f"), _f(r["reward"], ".3f"), _f(r.get("loadavg_1m"), ".1f"))
    console.print(t)
    console.print(f"zoo / TRL: step time [bold]{res['ratio']['step_time']:.2f}[/], "
                  f"peak memory [bold]{res['ratio']['peak_mem']:.2f}[/]", highlight=False)


def print_ranks(res: dict[str, Any]) -> None:
    """The per-rank table of `zoo bench --strategy ddp|fsdp --nproc N` (zoo/bench/ranks.py)."""
    d = res["distributed"]
    mem_kind = "CUDA max allocated" if res.get("device", "cpu").startswith("cuda") else "RSS high-water mark"
    t = Table(title=_title(res["spec"]) + f"\nstrategy {d['strategy']} on {d['world_size']} processes; median of "
                    f"{res['spec']['steps']} steps after {res['spec']['warmup']} warm-up; GB per rank ({mem_kind})")
    for c in ("rank", "step s", "peak", "weights", "grads", "optim", "w+g+o", "activ"):
        t.add_column(c, justify="right")
    for r in d["ranks"]:
        t.add_row(str(r["rank"]), _f(r.get("wall_s")), _gb(r["peak_mb"]), _gb(r["weights_mb"]), _gb(r["gradients_mb"]),
                  _gb(r["optimizer_mb"]), _gb(r["state_mb"]), _gb(r["activations_mb"]))
    t.caption = ("step s: this rank's wall time per step (median); w+g+o: weights + gradients + optimizer state the "
                 "rank holds (FSDP2: its shards); activ: peak - w+g+o - runtime")
    console.print(t)
    console.print("runtime (before the models loaded) GB: " + ", ".join(
        f"rank {r['rank']} {_gb(r['runtime_mb'])}" for r in d["ranks"]) + "; trainer's time/train (mean over ranks): "
        f"{d['ranks'][0]['train_s']:.2f} s", highlight=False)
    console.print(f"weights + gradients + optimizer state summed over ranks: {_gb(d['state_sum_mb'])} GB; "
                  f"largest peak {_gb(d['peak_max_mb'])} GB; slowest median step {d['step_max_s']:.2f} s",
                  highlight=False)


def check_launch(strategy: str, nproc: int | None, launched: bool, modes: int) -> None:
    """Raise ValueError where `--strategy` / `--nproc` cannot run: an unknown strategy, ddp/fsdp
    without --nproc or a launcher, --nproc N > 1 with single, or --nproc with --vs/--memory/--scan
    (their workers are single processes)."""
    from zoo.strategy import STRATEGIES

    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if strategy != "single" and nproc is None and not launched:
        raise ValueError(f"--strategy {strategy} needs processes: add --nproc N (zoo bench grpo --strategy "
                         f"{strategy} --nproc 2) or start it under torchrun")
    if strategy == "single" and (nproc or 1) > 1:
        raise ValueError(f"--nproc {nproc} with --strategy single: nothing would combine the ranks' gradients; "
                         "add --strategy ddp or fsdp")
    if (nproc is not None or strategy != "single") and modes:
        raise ValueError("--strategy/--nproc bench one configuration: not with --vs, --memory or --scan")


def print_decode(results: list[dict[str, Any]]) -> None:
    """The decode table: per backend, generation tokens/s, decode steps/s and time per decode step next to
    the bound (`zoo.bench.bound`) and the distance, plus the training step's seconds."""
    rates = "; ".join(f"{_si(r['decode']['matmul_flops_per_s'])}FLOP/s ({r['decode']['dtype']}), "
                      f"{_si(r['decode']['copy_bytes_per_s'])}B/s, {_f(r['decode']['rows_per_step'], '.0f')} x "
                      f"{_f(r['decode']['ctx_mean'], '.0f')}" for r in results)
    t = Table(title="Decode speed against this machine's bound (zoo.bench.bound; docs/performance.md)",
              caption="bound = max(FLOPs / matmul rate, bytes / copy bandwidth) per decode step; per row, measured "
                      f"in its run: matmul rate, copy bandwidth (read + written), rows x mean attended positions per "
                      f"step: {rates}; distance = measured / bound time, generate phase incl. prefill")
    for c in ("backend", "step s", "gen tok/s", "decode steps/s", "ms/step", "bound tok/s", "bound steps/s",
              "limit", "distance"):
        t.add_column(c, justify="left" if c in ("backend", "limit") else "right")
    for r in results:
        d, b = r["decode"], r["spec"].get("backend", "hf")
        t.add_row(b if isinstance(b, str) else json.dumps(b), _f(r["step"]["seconds"], ".2f"),
                  _f(d["tokens_per_s"], ".1f"), _f(d["steps_per_s"], ".2f"), _f(d["step_seconds"] * 1e3, ".1f"),
                  _f(d["bound_tokens_per_s"], ".0f"), _f(d["bound_steps_per_s"], ".1f"), d["limit"] or "-",
                  _f(d["distance"], ".1f") + "x" if d["distance"] == d["distance"] else "-")
    console.print(t)


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


@app.command()
def bench(
    variants: Optional[List[str]] = typer.Argument(None, help="variant to bench (several with --memory); default grpo"),
    model: str = typer.Option(EMBEDDED_MODEL, "--model", help="model name, local directory or Hub id"),
    prompts: int = typer.Option(8, "--prompts", min=1, help="prompts per step"),
    group_size: int = typer.Option(4, "--group-size", min=1, help="completions per prompt"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1),
    steps: int = typer.Option(3, "--steps", min=1, help="measured steps (after the warm-up)"),
    warmup: int = typer.Option(1, "--warmup", min=1, help="warm-up steps (not measured)"),
    lora: Optional[bool] = typer.Option(None, "--lora/--full", help="LoRA r16 on q,k,v,o or full fine-tuning "
                                        "(default full; --memory runs both unless one is given)"),
    checkpointing: bool = typer.Option(False, "--checkpointing", help="activation checkpointing in the train forward"),
    ignore_eos: bool = typer.Option(False, "--ignore-eos", help="every completion runs to --max-new-tokens (cost "
                                    "per token; otherwise completions stop at EOS). Not with --vs"),
    autocast: str = typer.Option("auto", "--autocast", help="auto | bf16 | none (auto: bf16 where the GPU "
                                 "or CPU runs it natively, else none = fp32; printed). fp16 is not supported"),
    micro_batch: int = typer.Option(8, "--micro-batch", min=1, help="completions per forward/backward"),
    updates: Optional[str] = typer.Option(None, "--updates", help="EPOCHSxMINIBATCHES per rollout (default: the "
                                          "variant's; 1x1 with --memory)"),
    set_: List[str] = typer.Option([], "--set", help="slot override, e.g. clip.eps_high=0.3 (repeatable)"),
    vs: Optional[str] = typer.Option(None, "--vs", help="'trl': race TRL's GRPOTrainer at matched settings"),
    rounds: int = typer.Option(2, "--rounds", min=1, help="--vs: alternations (zoo/TRL, then TRL/zoo, ...)"),
    memory: bool = typer.Option(False, "--memory", help="peak memory breakdown per variant, full and LoRA"),
    reward_model: Optional[str] = typer.Option(None, "--reward-model", help="also score with this reward model "
                                               "(a `reward_model` reward: HF id or directory); its weights are a line "
                                               "of the memory breakdown"),
    scan_: Optional[str] = typer.Option(None, "--scan", help="KEY=V1,V2,...: group_size, max_new_tokens, prompts "
                                        "or micro_batch"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="--scan: PNG path (default bench-scan-KEY.png)"),
    task: Optional[str] = typer.Option(None, "--task", help="task spec as a YAML/JSON mapping or a YAML file "
                                       "(default: worked 2-shot, 2-term arithmetic with 1-2 digit numbers)"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads (default: torch's choice)"),
    strategy: str = typer.Option("single", "--strategy", help="single | ddp | fsdp (training.strategy; ddp and "
                                 "fsdp need --nproc N or a launcher): per-rank memory and step time"),
    nproc: Optional[int] = typer.Option(None, "--nproc", min=1, help="start N processes of this machine under "
                                        "torchrun (with --strategy ddp or fsdp)"),
    seed: int = typer.Option(0, "--seed"),
    backend: List[str] = typer.Option([], "--backend", help="generator(s) to sample with (sampling.backend): a "
                                      "name, a comma list or repeated for side by side runs, or a YAML mapping "
                                      "'{name: noisy, sigma: 0.1}'; default hf"),
    as_json: bool = typer.Option(False, "--json", help="print the full result as JSON"),
    out: Optional[Path] = typer.Option(None, "--out", help="also write the JSON result to this file"),
) -> None:
    """Measure one training step phase by phase: seconds, tokens/s, peak memory, train FLOP/s.

    Examples:
      zoo bench grpo --steps 3
      zoo bench grpo --backend hf,noisy --ignore-eos --steps 2
      zoo bench dapo --lora --autocast bf16 --json
      zoo bench --vs trl --rounds 2 --steps 2
      zoo bench --memory ppo grpo dapo --steps 1
      zoo bench grpo --scan group_size=2,4,8,16 --plot docs/img/scan_group_size.png
      zoo bench grpo --strategy fsdp --nproc 2 --prompts 2 --group-size 2   (per-rank memory)
    """
    from zoo import bench as zb
    from zoo.cli import launch
    from zoo.config.variant import VariantError

    quiet_logs()
    if autocast == "fp16":
        fail("--autocast fp16 is not supported: training in fp16 needs a gradient scaler, which zoo does not "
             "have; use auto, bf16 or none")
    if autocast not in ("auto", "none", "bf16"):
        fail(f"--autocast {autocast!r}: use auto, bf16 or none")
    try:
        check_launch(strategy, nproc, launch.launched(), sum(bool(x) for x in (vs, memory, scan_)))
    except ValueError as e:
        fail(str(e))
    if nproc is not None and not launch.launched():
        raise typer.Exit(launch.relaunch(nproc, sys.argv[1:]))
    autocast, why = zb.resolve_bench_autocast(autocast)
    err.print(f"autocast {autocast}: {why}", highlight=False)
    names = list(variants or [])
    if vs is not None and vs.lower() != "trl":
        fail(f"--vs {vs!r}: only 'trl' is supported")
    modes = sum(bool(x) for x in (vs, memory, scan_))
    if modes > 1:
        fail("use one of --vs, --memory, --scan at a time")
    if plot is not None and not scan_:
        fail("--plot draws a --scan; add e.g. --scan group_size=2,4,8")
    if vs and ignore_eos:
        fail("--ignore-eos is not matched on TRL's side; race without it")
    if not memory and len(names) > 1:
        fail(f"one variant at a time (got {', '.join(names)}); compare several with --memory")
    try:
        zb.parse_updates(updates)
        backends = parse_backends(backend)
    except ValueError as e:
        fail(str(e))
    if len(backends) > 1 and modes:
        fail("several --backend values run side by side in a plain bench; not with --vs, --memory or --scan")
    task_spec = dict(zb.BENCH_TASK)
    if task is not None:
        import yaml

        try:
            data = yaml.safe_load(Path(task).read_text() if Path(task).is_file() else task)
        except (yaml.YAMLError, OSError) as e:
            fail(f"--task: {e}")
        if isinstance(data, dict) and isinstance(data.get("task"), dict):
            data = data["task"]  # a run/study YAML: take its task
        if not isinstance(data, dict):
            fail("--task: expected a mapping such as '{name: reasoning_gym, dataset: basic_arithmetic}'")
        task_spec = data
    spec = zb.BenchSpec(task=task_spec, variant=names[0] if names else "grpo", model=model, prompts=prompts, group_size=group_size,
                        max_new_tokens=max_new_tokens, steps=steps, warmup=warmup, lora=bool(lora), autocast=autocast, checkpointing=checkpointing,
                        ignore_eos=ignore_eos,
                        micro_batch=micro_batch, updates=updates, sets=parse_sets(set_), seed=seed, threads=threads,
                        strategy=strategy, backend=backends[0])
    if reward_model:
        spec = replace(spec, rewards=list(spec.rewards) + [{"name": "reward_model", "model": reward_model}])
    log = (lambda msg: err.print(f"[dim]{msg}[/]", highlight=False))
    try:
        if vs:
            from zoo.bench.trl import INSTALL_HINT, trl_available

            if not trl_available():
                fail(INSTALL_HINT)
            if names:
                err.print("[yellow]note:[/] --vs trl always races the TRL-matched GRPO settings; the variant is ignored")
            res = zb.vs_trl(spec, rounds=rounds, log=log)
            show = print_vs
        elif memory:
            if not names:
                names = ["ppo", "grpo", "dapo"]
            if updates is None:
                spec = replace(spec, updates="1x1")
            modes_ = (False, True) if lora is None else (bool(lora),)
            res = zb.compare_memory(spec, names, modes_, log=log)
            show = print_memory
        elif scan_:
            key, values = zb.parse_scan(scan_)
            res = zb.scan(spec, key, values, log=log)
            path = plot or Path(f"bench-scan-{key}.png")
            res["plot"] = str(zb.plot_scan(res, path))
            show = lambda r: print_scan(r, path)  # noqa: E731
        elif launch.launched():
            from zoo.bench.ranks import bench_ranks

            res = bench_ranks(spec, on_step=lambda i, row: log(f"step {i}/{steps}: {row['step']['seconds']:.2f} s"))
            show = print_ranks
        else:
            runs = []
            for b in backends:
                log(f"backend {b}")
                runs.append(zb.run_bench(replace(spec, backend=b), on_step=lambda i, row: log(
                    f"step {i}/{steps}: {row['step']['seconds']:.2f} s")))
            res = runs[0] if len(runs) == 1 else {"backends": runs}

            def show(r: dict[str, Any]) -> None:
                for one in r.get("backends", [r]):
                    print_bench(one)
                print_decode(r.get("backends", [r]))
    except (VariantError, ValueError) as e:
        fail(str(e))
    except RuntimeError as e:
        fail(str(e))
    from zoo.precision import describe

    res["precision"] = describe(autocast, why)
    from zoo import dist

    if dist.rank() != 0:  # rank 0 prints and writes for all ranks
        return
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2, default=str))
    if as_json:
        sys.stdout.write(json.dumps(res, indent=2, default=str) + "\n")
    else:
        show(res)
