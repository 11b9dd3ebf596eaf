"""`zoo bench` (registered on `zoo.cli.common.app`): step cost per phase, TRL race, memory, scaling scans."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, List, Optional

import typer

from zoo.cli.bench_options import check_launch, parse_backends
from zoo.cli.bench_tables import print_bench, print_bound, print_decode, print_memory, print_ranks, print_scan, print_vs
from zoo.cli.common import app, err, fail, parse_sets, print_threads, quiet_logs
from zoo.models import EMBEDDED_MODEL


@app.command()
def bench(
    variants: Optional[List[str]] = typer.Argument(None, help="variant to bench (several with --memory); default grpo"),
    model: str = typer.Option(EMBEDDED_MODEL, "--model", help="model name, local directory or Hub id"),
    prompts: int = typer.Option(8, "--prompts", min=1, help="prompts per step"),
    group_size: int = typer.Option(4, "--group-size", min=1, help="completions per prompt"),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1),
    steps: int = typer.Option(3, "--steps", min=1, help="measured steps (after the warm-up)"),
    warmup: int = typer.Option(1, "--warmup", min=1, help="warm-up steps (not measured)"),
    lora: Optional[bool] = typer.Option(
        None,
        "--lora/--full",
        help="LoRA r16 on q,k,v,o or full fine-tuning (default full; --memory runs both unless one is given)",
    ),
    checkpointing: bool = typer.Option(False, "--checkpointing", help="activation checkpointing in the train forward"),
    ignore_eos: bool = typer.Option(
        False,
        "--ignore-eos",
        help="every completion runs to --max-new-tokens (cost "
        "per token; otherwise completions stop at EOS). Not with --vs",
    ),
    autocast: str = typer.Option(
        "auto",
        "--autocast",
        help="auto | bf16 | none (auto: bf16 where the GPU "
        "or CPU runs it natively, else none = fp32; printed). fp16 is not supported",
    ),
    micro_batch: int = typer.Option(8, "--micro-batch", min=1, help="completions per forward/backward"),
    updates: Optional[str] = typer.Option(
        None, "--updates", help="EPOCHSxMINIBATCHES per rollout (default: the variant's; 1x1 with --memory)"
    ),
    set_: List[str] = typer.Option([], "--set", help="slot override, e.g. clip.eps_high=0.3 (repeatable)"),
    vs: Optional[str] = typer.Option(None, "--vs", help="'trl': race TRL's GRPOTrainer at matched settings"),
    rounds: int = typer.Option(2, "--rounds", min=1, help="--vs: alternations (zoo/TRL, then TRL/zoo, ...)"),
    memory: bool = typer.Option(False, "--memory", help="peak memory breakdown per variant, full and LoRA"),
    reward_model: Optional[str] = typer.Option(
        None,
        "--reward-model",
        help="also score with this reward model "
        "(a `reward_model` reward: HF id or directory); its weights are a line "
        "of the memory breakdown",
    ),
    scan_: Optional[str] = typer.Option(
        None, "--scan", help="KEY=V1,V2,...: group_size, max_new_tokens, prompts or micro_batch"
    ),
    plot: Optional[Path] = typer.Option(None, "--plot", help="--scan: PNG path (default bench-scan-KEY.png)"),
    task: Optional[str] = typer.Option(
        None,
        "--task",
        help="task spec as a YAML/JSON mapping or a YAML file "
        "(default: worked 2-shot, 2-term arithmetic with 1-2 digit numbers)",
    ),
    threads: Optional[int] = typer.Option(
        None,
        "--threads",
        min=1,
        help="torch CPU threads (default: the CPUs this process may use minus other zoo runs' threads)",
    ),
    strategy: str = typer.Option(
        "single",
        "--strategy",
        help="single | ddp | fsdp (training.strategy; ddp and "
        "fsdp need --nproc N or a launcher): per-rank memory and step time",
    ),
    nproc: Optional[int] = typer.Option(
        None, "--nproc", min=1, help="start N processes of this machine under torchrun (with --strategy ddp or fsdp)"
    ),
    seed: int = typer.Option(0, "--seed"),
    backend: List[str] = typer.Option(
        [],
        "--backend",
        help="generator(s) to sample with (sampling.backend): a "
        "name, a comma list or repeated for side by side runs, or a YAML mapping "
        "'{name: noisy, sigma: 0.1}'; default hf",
    ),
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
        fail(
            "--autocast fp16 is not supported: training in fp16 needs a gradient scaler, which zoo does not "
            "have; use auto, bf16 or none"
        )
    if autocast not in ("auto", "none", "bf16"):
        fail(f"--autocast {autocast!r}: use auto, bf16 or none")
    try:
        check_launch(strategy, nproc, launch.launched(), sum(bool(x) for x in (vs, memory, scan_)))
    except ValueError as e:
        fail(str(e))
    if nproc is not None and not launch.launched():
        raise typer.Exit(launch.relaunch(nproc, sys.argv[1:]))
    setting = autocast
    autocast, why = zb.resolve_bench_autocast(setting)
    why = f"auto: {why}" if setting == "auto" else f"--autocast {setting}"
    err.print(f"autocast {autocast} ({why})", highlight=False)
    print_threads()
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
    spec = zb.BenchSpec(
        task=task_spec,
        variant=names[0] if names else "grpo",
        model=model,
        prompts=prompts,
        group_size=group_size,
        max_new_tokens=max_new_tokens,
        steps=steps,
        warmup=warmup,
        lora=bool(lora),
        autocast=autocast,
        checkpointing=checkpointing,
        ignore_eos=ignore_eos,
        micro_batch=micro_batch,
        updates=updates,
        sets=parse_sets(set_),
        seed=seed,
        threads=threads,
        strategy=strategy,
        backend=backends[0],
        autocast_setting=setting,
    )
    if reward_model:
        spec = replace(spec, rewards=list(spec.rewards) + [{"name": "reward_model", "model": reward_model}])
    if memory and not names:
        names = ["ppo", "grpo", "dapo"]
    if memory and updates is None:
        spec = replace(spec, updates="1x1")
    try:  # every variant and the reward model, before any worker starts
        from zoo.bench.precheck import check_bench

        if vs:  # the race runs the TRL-matched variant, one update per rollout (zoo.bench.compare.vs_trl)
            check_bench(replace(spec, updates="1x1"), [zb.TRL_MATCHED_VARIANT])
        else:
            check_bench(spec, names or [spec.variant])
    except ValueError as e:
        fail(str(e))

    def log(msg: str) -> None:
        err.print(f"[dim]{msg}[/]", highlight=False)

    if vs:
        from zoo.bench.trl import INSTALL_HINT, trl_available

        if not trl_available():  # here, not in the try below: typer.Exit is a RuntimeError
            fail(INSTALL_HINT)
    try:
        if vs:
            if names:
                err.print(
                    "[yellow]note:[/] --vs trl always races the TRL-matched GRPO settings; the variant is ignored"
                )
            res = zb.vs_trl(spec, rounds=rounds, log=log)
            show = print_vs
        elif memory:
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
                runs.append(
                    zb.run_bench(
                        replace(spec, backend=b),
                        on_step=lambda i, row: log(f"step {i}/{steps}: {row['step']['seconds']:.2f} s"),
                    )
                )
            res = runs[0] if len(runs) == 1 else {"backends": runs}

            def show(r: dict[str, Any]) -> None:
                for one in r.get("backends", [r]):
                    print_bench(one)
                    print_bound(one)
                print_decode(r.get("backends", [r]))
    except (VariantError, ValueError) as e:
        fail(str(e))
    except RuntimeError as e:
        fail(str(e))
    from zoo.run.precision import describe

    res["precision"] = describe(autocast, why)
    from zoo.core import dist

    if dist.rank() != 0:  # rank 0 prints and writes for all ranks
        return
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2, default=str))
    if as_json:
        sys.stdout.write(json.dumps(res, indent=2, default=str) + "\n")
    else:
        show(res)
