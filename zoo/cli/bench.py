"""`zoo bench` (registered on `zoo.cli.common.app`): step cost per phase, TRL race, memory, scaling scans.

The command checks its options (`_check_options`), builds the `BenchSpec` (`_make_spec`), checks every
variant before any worker starts (`_precheck`), runs the one mode asked for (`_measure`) and prints or
writes the result (`_emit`); the options themselves are declared in `zoo.cli.bench_options`."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from zoo.cli import bench_options as opt
from zoo.cli.bench_options import BenchArgs, check_launch, parse_backends
from zoo.cli.bench_tables import print_bench, print_bound, print_decode, print_memory, print_ranks, print_scan, print_vs
from zoo.cli.common import app, err, fail, parse_sets, print_threads, quiet_logs

__all__ = ["bench", "print_ranks"]  # print_ranks: tests/distributed/test_bench_ranks.py imports it from here


@app.command()
def bench(
    variants: Optional[List[str]] = opt.VARIANTS,
    model: str = opt.MODEL,
    prompts: int = opt.PROMPTS,
    group_size: int = opt.GROUP_SIZE,
    max_new_tokens: int = opt.MAX_NEW_TOKENS,
    steps: int = opt.STEPS,
    warmup: int = opt.WARMUP,
    lora: Optional[bool] = opt.LORA,
    checkpointing: bool = opt.CHECKPOINTING,
    ignore_eos: bool = opt.IGNORE_EOS,
    autocast: str = opt.AUTOCAST,
    micro_batch: int = opt.MICRO_BATCH,
    updates: Optional[str] = opt.UPDATES,
    set_: List[str] = opt.SET,
    vs: Optional[str] = opt.VS,
    rounds: int = opt.ROUNDS,
    memory: bool = opt.MEMORY,
    reward_model: Optional[str] = opt.REWARD_MODEL,
    scan_: Optional[str] = opt.SCAN,
    plot: Optional[Path] = opt.PLOT,
    task: Optional[str] = opt.TASK,
    threads: Optional[int] = opt.THREADS,
    strategy: str = opt.STRATEGY,
    nproc: Optional[int] = opt.NPROC,
    seed: int = opt.SEED,
    backend: List[str] = opt.BACKEND,
    async_: Optional[str] = opt.ASYNC,
    async_workers: int = opt.ASYNC_WORKERS,
    as_json: bool = opt.AS_JSON,
    out: Optional[Path] = opt.OUT,
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
      zoo bench grpo --async 1,2 --steps 4     (sync, then async at k 1 and 2: s/step, staleness, waits)
    """
    a = BenchArgs(**locals())
    quiet_logs()
    _check_launch(a)
    autocast_, why = _resolve_autocast(a.autocast)
    print_threads()
    backends = _check_options(a)
    spec, names = _make_spec(a, autocast_, backends, _read_task(a.task))
    _precheck(spec, names, a.vs)
    res, show = _measure(a, spec, names, backends)
    from zoo.run.precision import describe

    res["precision"] = describe(autocast_, why)
    _emit(res, show, a.out, a.as_json)


def _check_launch(a: BenchArgs) -> None:
    """Refuse an unsupported --autocast or --strategy/--nproc; with --nproc N outside a launcher, start
    N copies of this command under torchrun and exit with their status."""
    from zoo.cli import launch

    if a.autocast == "fp16":
        fail(
            "--autocast fp16 is not supported: training in fp16 needs a gradient scaler, which zoo does not "
            "have; use auto, bf16 or none"
        )
    if a.autocast not in ("auto", "none", "bf16"):
        fail(f"--autocast {a.autocast!r}: use auto, bf16 or none")
    try:
        check_launch(a.strategy, a.nproc, launch.launched(), a.modes)
    except ValueError as e:
        fail(str(e))
    if a.nproc is not None and not launch.launched():
        raise typer.Exit(launch.relaunch(a.nproc, sys.argv[1:]))


def _resolve_autocast(setting: str) -> tuple[str, str]:
    """(the autocast the bench runs with, why), printed as one line on stderr."""
    from zoo import bench as zb

    autocast, why = zb.resolve_bench_autocast(setting)
    why = f"auto: {why}" if setting == "auto" else f"--autocast {setting}"
    err.print(f"autocast {autocast} ({why})", highlight=False)
    return autocast, why


def _check_options(a: BenchArgs) -> list[Any]:
    """Refuse options that do not go together; the --backend values as generator specs."""
    from zoo import bench as zb

    names = list(a.variants or [])
    if a.vs is not None and a.vs.lower() != "trl":
        fail(f"--vs {a.vs!r}: only 'trl' is supported")
    if a.modes > 1:
        fail("use one of --vs, --memory, --scan at a time")
    if a.plot is not None and not a.scan_:
        fail("--plot draws a --scan; add e.g. --scan group_size=2,4,8")
    if a.vs and a.ignore_eos:
        fail("--ignore-eos is not matched on TRL's side; race without it")
    if not a.memory and len(names) > 1:
        fail(f"one variant at a time (got {', '.join(names)}); compare several with --memory")
    try:
        zb.parse_updates(a.updates)
        backends = parse_backends(a.backend)
        opt.check_async_workers(opt.parse_async(a.async_), a.async_workers, a.prompts)
    except ValueError as e:
        fail(str(e))
    if len(backends) > 1 and a.modes:
        fail("several --backend values run side by side in a plain bench; not with --vs, --memory or --scan")
    if a.async_ and (a.modes or len(backends) > 1 or a.nproc or a.strategy != "single"):
        fail(
            "--async benches one generator in one process: not with --vs, --memory, --scan, --nproc or several --backend"
        )
    return backends


def _read_task(task: str | None) -> dict[str, Any]:
    """--task as a task spec: a YAML/JSON mapping, a YAML file (a run or study file gives its `task`),
    or the bench's default task."""
    from zoo import bench as zb

    if task is None:
        return dict(zb.BENCH_TASK)
    import yaml

    try:
        data = yaml.safe_load(Path(task).read_text() if Path(task).is_file() else task)
    except (yaml.YAMLError, OSError) as e:
        fail(f"--task: {e}")
    if isinstance(data, dict) and isinstance(data.get("task"), dict):
        data = data["task"]  # a run/study YAML: take its task
    if not isinstance(data, dict):
        fail("--task: expected a mapping such as '{name: reasoning_gym, dataset: basic_arithmetic}'")
    return data


def _make_spec(a: BenchArgs, autocast: str, backends: list[Any], task_spec: dict[str, Any]) -> tuple[Any, list[str]]:
    """(the BenchSpec of the options, the variants to bench: ppo, grpo and dapo for a bare --memory)."""
    from zoo import bench as zb

    names = list(a.variants or [])
    spec = zb.BenchSpec(
        task=task_spec,
        variant=names[0] if names else "grpo",
        model=a.model,
        prompts=a.prompts,
        group_size=a.group_size,
        max_new_tokens=a.max_new_tokens,
        steps=a.steps,
        warmup=a.warmup,
        lora=bool(a.lora),
        autocast=autocast,
        checkpointing=a.checkpointing,
        ignore_eos=a.ignore_eos,
        micro_batch=a.micro_batch,
        updates=a.updates,
        sets=parse_sets(a.set_),
        seed=a.seed,
        threads=a.threads,
        strategy=a.strategy,
        backend=backends[0],
        autocast_setting=a.autocast,
    )
    if a.reward_model:
        spec = replace(spec, rewards=list(spec.rewards) + [{"name": "reward_model", "model": a.reward_model}])
    if a.memory and not names:
        names = ["ppo", "grpo", "dapo"]
    if a.memory and a.updates is None:
        spec = replace(spec, updates="1x1")
    return spec, names


def _precheck(spec: Any, names: list[str], vs: str | None) -> None:
    """Every variant and the reward model checked before any worker starts; TRL installed for --vs."""
    from zoo import bench as zb
    from zoo.bench.precheck import check_bench

    try:
        if vs:  # the race runs the TRL-matched variant, one update per rollout (zoo.bench.compare.vs_trl)
            check_bench(replace(spec, updates="1x1"), [zb.TRL_MATCHED_VARIANT])
        else:
            check_bench(spec, names or [spec.variant])
    except ValueError as e:
        fail(str(e))
    if vs:
        from zoo.bench.trl import INSTALL_HINT, trl_available

        if not trl_available():  # here, not in _measure's try: typer.Exit is a RuntimeError
            fail(INSTALL_HINT)


def _log(msg: str) -> None:
    err.print(f"[dim]{msg}[/]", highlight=False)


def _measure(
    a: BenchArgs, spec: Any, names: list[str], backends: list[Any]
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], None]]:
    """Run the mode asked for (--vs, --memory, --scan, under a launcher, or a plain bench of each
    --backend): (the result, the function that prints it). An error is one line (exit 1)."""
    from zoo import bench as zb
    from zoo.cli import launch
    from zoo.config.variant import VariantError

    def on_step(i: int, row: dict[str, Any]) -> None:
        _log(f"step {i}/{a.steps}: {row['step']['seconds']:.2f} s")

    try:
        if a.vs:
            if names:
                err.print(
                    "[yellow]note:[/] --vs trl always races the TRL-matched GRPO settings; the variant is ignored"
                )
            return zb.vs_trl(spec, rounds=a.rounds, log=_log), print_vs
        if a.memory:
            modes = (False, True) if a.lora is None else (bool(a.lora),)
            return zb.compare_memory(spec, names, modes, log=_log), print_memory
        if a.scan_:
            key, values = zb.parse_scan(a.scan_)
            res = zb.scan(spec, key, values, log=_log)
            path = a.plot or Path(f"bench-scan-{key}.png")
            res["plot"] = str(zb.plot_scan(res, path))
            return res, lambda r: print_scan(r, path)
        if launch.launched():
            from zoo.bench.ranks import bench_ranks

            return bench_ranks(spec, on_step=on_step), print_ranks
        if a.async_:
            return _measure_async(spec, a, on_step), _show_async
        runs = []
        for b in backends:
            _log(f"backend {b}")
            runs.append(zb.run_bench(replace(spec, backend=b), on_step=on_step))
        return (runs[0] if len(runs) == 1 else {"backends": runs}), _show_plain
    except (VariantError, ValueError, RuntimeError) as e:
        fail(str(e))
        raise  # unreachable: fail exits


def _measure_async(spec: Any, a: BenchArgs, on_step: Callable[[int, dict[str, Any]], None]) -> dict[str, Any]:
    """The synchronous step, then async at each --async k: {"backends": [runs]} (one run each)."""
    from zoo import bench as zb

    runs = []
    for k in [None, *opt.parse_async(a.async_)]:
        _log("synchronous" if k is None else f"async k={k}, {a.async_workers} worker(s)")
        runs.append(zb.run_bench(replace(spec, max_staleness=k, async_workers=a.async_workers), on_step=on_step))
    return {"backends": runs}


def _show_async(r: dict[str, Any]) -> None:
    """Each run's tables, then sync against async: s/step, samples/s, staleness and the waits."""
    from zoo.cli.bench_tables import print_async

    _show_plain(r)
    print_async(r["backends"])


def _show_plain(r: dict[str, Any]) -> None:
    """A plain bench's tables: per backend the phases and the bound, then the decode rows of all."""
    for one in r.get("backends", [r]):
        print_bench(one)
        print_bound(one)
    print_decode(r.get("backends", [r]))


def _emit(res: dict[str, Any], show: Callable[[dict[str, Any]], None], out: Path | None, as_json: bool) -> None:
    """On rank 0 (it prints and writes for all ranks): write --out, then print JSON or the tables."""
    from zoo.core import dist

    if dist.rank() != 0:
        return
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2, default=str))
    if as_json:
        sys.stdout.write(json.dumps(res, indent=2, default=str) + "\n")
    else:
        show(res)
