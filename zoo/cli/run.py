"""`zoo run | ablate | report | export` (registered on `zoo.cli.common.app`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, List, Optional

import typer

from zoo.cli.common import app, console, fail, parse_sets, print_threads, quiet_logs, run_dir_problem
from zoo.cli.stopping import interrupt_code, stop_always, uninstalls_watchdog
from zoo.config.run import RunConfig
from zoo.config.set_flag import blame_set_flag


def name_refused_file(src: Path | None, e: BaseException | str) -> None:
    """Print `SRC: refused` before a config error that does not name its file (the checks name keys)."""
    if src is not None and str(src) not in str(e):
        from rich.markup import escape

        from zoo.cli.common import err

        err.print(f"{escape(str(src))}: refused", highlight=False, soft_wrap=True)


@app.command()
@uninstalls_watchdog
def run(
    config: Optional[Path] = typer.Argument(None, help="run YAML (or a study file with a single arm)"),
    set_: List[str] = typer.Option(
        [], "--set", help="dotted override: budget.steps=3, variant=ppo, set.clip.eps_high=0.3"
    ),
    resume: Optional[Path] = typer.Option(
        None, "--resume", help="continue the run in this directory from its last checkpoint"
    ),
    fresh: bool = typer.Option(
        False, "--fresh", help="delete the output directory's checkpoint and results and train from scratch"
    ),
    threads: Optional[int] = typer.Option(
        None,
        "--threads",
        min=1,
        help="torch CPU threads (default: the CPUs this "
        "process may use minus other zoo runs' threads; docs/results/performance-threads.md)",
    ),
    nproc: Optional[int] = typer.Option(
        None,
        "--nproc",
        min=1,
        help="start N processes of this machine under torchrun (with training.strategy ddp or fsdp)",
    ),
) -> None:
    """Train one variant (one seed) end to end, printing per-step metrics.

    Examples:
      zoo run run.yaml --set budget.steps=3
      zoo run run.yaml --set variant=ppo
      zoo run --resume runs/my-run
      zoo run run.yaml --nproc 2 --set training.strategy=ddp   (or torchrun ... -m zoo.cli run ...)
      zoo run run.yaml --set async.max_staleness=2 --set async.workers=2   (asynchronous: rollout workers
        generate while the trainer trains, groups at most 2 versions old; backend thread, ray or simulated:
        docs/guides/async.md)

    Every YAML key, its default and what it does: docs/reference/run-file.md (example: examples/run_grpo.yaml).
    """
    import sys

    import torch

    from zoo.cli import launch

    if nproc is not None and not launch.launched():
        if nproc > 1 and config is not None and resume is None:  # refuse before torchrun starts N copies of the error
            _refuse_before_launch(config, set_, nproc)
        raise typer.Exit(launch.relaunch(nproc, sys.argv[1:]))
    quiet_logs()
    print_threads()
    stop_always()
    if threads:
        torch.set_num_threads(threads)
    cfg = _run_config(config, set_, resume)
    src = config if config is not None else resume / "config.yaml" if resume is not None else None
    _train(cfg, src, fresh, parse_sets(set_))


def _refuse_before_launch(config: Path, set_: list[str], nproc: int) -> None:
    """`zoo run --nproc N` (N > 1): refuse what each rank would refuse (zoo.checks.before_load), and a
    single strategy, in this process, before torchrun starts N copies of the error."""
    from zoo.checks import before_load
    from zoo.config.variant import VariantError
    from zoo.study.run_file import load_run_config

    sets = parse_sets(set_)
    try:
        cfg = load_run_config(config, sets)
    except VariantError as e:
        fail(blame_set_flag(str(e), sets, RunConfig, source=config))
    if cfg.training.strategy == "single":
        fail(
            f"--nproc {nproc} with training.strategy single: nothing would combine the ranks' gradients; "
            "add --set training.strategy=ddp (or fsdp)"
        )
    errors = before_load(cfg, world_size=nproc, launched=True)[0].errors  # what each rank would refuse
    if errors:
        fail(blame_set_flag("\n".join(errors), sets, RunConfig, source=config))


def _run_config(config: Path | None, set_: list[str], resume: Path | None) -> Any:
    """The RunConfig `zoo run` trains: the run file with --set applied, or a run folder's config.yaml
    for --resume (its output_dir the folder). One line and exit 1 for a problem; one about a value a
    --set gave names the flag (`zoo.config.set_flag.blame_set_flag`)."""
    from zoo.config.variant import VariantError
    from zoo.study.run_file import load_run_config

    sets = parse_sets(set_)
    try:
        if resume is not None and config is not None:
            fail(
                f"give either a run YAML ({config}) or --resume {resume}, not both: a resumed run keeps "
                "the configuration it started with"
            )
        if resume is not None:
            problem = run_dir_problem(resume, "--resume")
            if problem:
                fail(problem)
            return load_run_config(resume / "config.yaml", {**sets, "output_dir": str(resume)})
        if config is None:
            fail("give a run YAML (zoo run run.yaml) or --resume RUN_DIR")
        return load_run_config(config, sets)
    except VariantError as e:
        fail(blame_set_flag(str(e), sets, RunConfig, source=config if config is not None else resume))


def _train(cfg: Any, src: Path | None, fresh: bool, sets: dict[str, Any]) -> None:
    """Train `cfg` (read from `src`, with the --set overrides `sets`), then print its one `finished`
    line (rank 0). An error, a failed run or an interrupt is one line naming what to do, with the exit
    status of each."""
    from zoo.backends.train.checkpoint import CheckpointError
    from zoo.config.variant import VariantError
    from zoo.core.faults import os_error_message
    from zoo.core.guards import RunFailed
    from zoo.run.trainer import train

    try:
        summary = train(cfg, resume=not fresh)
    except (VariantError, CheckpointError) as e:
        msg = blame_set_flag(str(e), sets, RunConfig, source=src)
        name_refused_file(src, msg)
        fail(msg)
    except OSError as e:  # disk full, read-only folder: one line naming the file (zoo.core.faults)
        fail(os_error_message(e))
    except RunFailed as e:  # a run that cannot learn (zoo/core/guards.py): summary.json says failed
        fail(f"run failed: {e} ({cfg.out_dir()}/summary.json: status failed)")
    except KeyboardInterrupt as e:
        if (cfg.out_dir() / "config.yaml").exists():
            fail(f"interrupted; resume with: zoo run --resume {cfg.out_dir()}", interrupt_code(e))
        fail("interrupted before the run saved anything; run the same command again to start it", interrupt_code(e))
    from zoo.core import dist

    if dist.rank() != 0:  # one line per run, not per process
        return
    console.print(
        f"[green]finished[/] {cfg.out_dir()}  reward/total {summary.get('reward/total', float('nan')):.4f}  "
        f"eval {greedy_acc(summary, 'eval/before')} -> {greedy_acc(summary, 'eval/after')}",
        highlight=False,
    )


def greedy_acc(summary: dict, key: str) -> str:
    """`summary[key]["eval/greedy_acc"]` as "0.583", or "-" where the run has none (eval disabled, no
    correctness reward). A resumed run's summary carries eval/before from its first process."""
    acc = (summary.get(key) or {}).get("eval/greedy_acc")
    return f"{acc:.3f}" if isinstance(acc, (int, float)) else "-"


@app.command()
@uninstalls_watchdog
def ablate(
    study: Path = typer.Argument(..., help="study YAML (experiments/*.yaml)"),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="check every arm and print the plan; run nothing, write nothing (see --write-configs)",
    ),
    write_configs: bool = typer.Option(
        False,
        "--write-configs",
        help="with --dry-run: also write each arm's resolved config to <output_dir>/<arm>/config.yaml "
        "and print the `zoo run` command that runs it (e.g. one cluster job per arm)",
    ),
    shard: Optional[str] = typer.Option(None, "--shard", help="i/n: run only arms i, i+n, ... (0-based), for clusters"),
    set_: List[str] = typer.Option([], "--set", help="dotted override applied to every arm, e.g. budget.steps=2"),
    threads: Optional[int] = typer.Option(
        None,
        "--threads",
        min=1,
        help="torch CPU threads (default: the CPUs this process may use minus other zoo runs' threads)",
    ),
    fresh: List[str] = typer.Option(
        [],
        "--fresh",
        help="ARM: delete this arm's results and retrain it (a label like grpo-s0, or grpo for all its seeds); repeatable",
    ),
    ray: bool = typer.Option(
        False,
        "--ray",
        help="each arm a Ray task with the study's `resources`, on a local Ray "
        "started here unless --ray-address; shared filesystem assumed (pip install 'variant-zoo\\[ray]')",
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray-address",
        metavar="ADDRESS",
        help="with --ray (implied): join this cluster, 'auto' or 'ray://head:10001'",
    ),
) -> None:
    """Run every arm of a study (variants and ablations x seeds x sweep points) and write a report.

    Finished arms with the same config are skipped on a re-run and unfinished ones resume from their checkpoint; an arm whose config changed is an error naming the changed keys (retrain it with --fresh ARM); arms another process is running are skipped; a failed arm is recorded and the study goes on. Exit status 0 only if every arm finished.

    Study keys (variants, ablations, seeds, sweep, budget, ...): docs/reference/study-file.md; shipped studies: experiments/*.yaml.
    How much staleness a correction tolerates, swept over `async.max_staleness`: experiments/staleness.yaml.
    """
    import torch

    quiet_logs()
    print_threads()
    stop_always()
    if threads:
        torch.set_num_threads(threads)
    if write_configs and not dry_run:
        fail("--write-configs goes with --dry-run (a study that runs writes each arm's config.yaml anyway)")
    sh = _parse_shard(shard)
    try:
        code = _run_study(
            study, set_, dry_run, write_configs, sh, tuple(fresh), ray or bool(ray_address), ray_address, threads
        )
    except KeyboardInterrupt as e:
        pending = getattr(e, "pending_fresh", fresh)  # --fresh arms not reached yet keep their --fresh
        again = _ablate_again(study, set_, pending, shard, ray, ray_address)
        fail(
            f"interrupted; finished arms are kept and the interrupted one resumes from its last checkpoint: {again}",
            interrupt_code(e),
        )
    raise typer.Exit(code)


def _parse_shard(shard: str | None) -> tuple[int, int] | None:
    """--shard i/n as (i, n) with 0 <= i < n; None without it; one line and exit 1 otherwise."""
    if not shard:
        return None
    try:
        i, n = (int(x) for x in shard.split("/"))
        assert 0 <= i < n
        return (i, n)
    except (ValueError, AssertionError):
        fail(f"--shard {shard!r}: expected i/n with 0 <= i < n, e.g. 0/4")


def _run_study(
    study: Path,
    set_: list[str],
    dry_run: bool,
    write_configs: bool,
    shard: tuple[int, int] | None,
    fresh: tuple[str, ...],
    ray: bool,
    ray_address: str | None,
    threads: int | None,
) -> int:
    """Load the study with --set applied and run (or plan) its arms, here or as Ray tasks: the exit
    status (0 only if every arm finished). A refused study or a file-system error is one line."""
    from zoo.config.variant import VariantError
    from zoo.study import experiment, runner

    sets = parse_sets(set_)
    try:
        if "tta" in experiment.read_study_file(Path(study)):  # experiments/grpo_tta.yaml (zoo.config.tta)
            from zoo.cli.tta import ablate_tta

            given = [o for o, on in (("--set", set_), ("--write-configs", write_configs), ("--shard", shard),
                                     ("--fresh", fresh), ("--ray", ray or ray_address)) if on]  # fmt: skip
            if given:
                raise VariantError(
                    f"{study}: a `zoo tta` study takes none of {', '.join(given)} (it runs in one process)"
                )
            return ablate_tta(Path(study), dry_run)
        st = experiment.load_study(study, overrides=sets)
        run_arms = None
        if ray:
            from zoo.study import ray_runner

            ray_runner.import_ray()  # before any arm is planned: without Ray, say how to install it
            run_arms = functools.partial(
                ray_runner.run_arms_on_ray, address=ray_address, resources=st.resources, threads=threads
            )
        return runner.run_study(
            st,
            dry_run=dry_run,
            write_configs=write_configs,
            shard=shard,
            console=console,
            fresh=fresh,
            run_arms=run_arms,
        )
    except VariantError as e:
        msg = blame_set_flag(str(e), sets, RunConfig, source=study)
        name_refused_file(study, msg)
        fail(msg)
    except OSError as e:  # disk full, read-only folder: one line naming the file (zoo.core.faults)
        from zoo.core.faults import os_error_message

        fail(os_error_message(e))
    return 1  # unreachable: fail exits


def _ablate_again(
    study: Path, set_: list[str], pending: Any, shard: str | None, ray: bool, ray_address: str | None
) -> str:
    """The `zoo ablate` command that continues an interrupted study: the same --set, --shard and Ray
    options, and the --fresh arms not reached yet."""
    import shlex

    return shlex.join(
        [
            "zoo",
            "ablate",
            str(study),
            *(a for x in set_ for a in ("--set", x)),
            *(a for x in pending for a in ("--fresh", x)),
            *(["--shard", shard] if shard else []),
            *(["--ray"] if ray or ray_address else []),
            *(["--ray-address", ray_address] if ray_address else []),
        ]
    )


@app.command()
def report(
    study_dir: Path = typer.Argument(..., help="runs/<study>"),
    as_json: bool = typer.Option(
        False, "--json", help="print the statistics (report.json) as JSON instead of the tables"
    ),
) -> None:
    """Write runs/<study>/report.md, report.json and PNG plots from the arms' metrics, and print the tables."""
    import io

    from rich.console import Console

    from zoo.study.report import write_report

    if not study_dir.is_dir():
        fail(f"{study_dir}: not a directory")
    path = write_report(study_dir, console=Console(file=io.StringIO()) if as_json else console)
    if as_json:
        print((path.parent / "report.json").read_text(encoding="utf-8"))
    else:
        console.print(f"wrote {path}")


@app.command("export")
def export_cmd(
    run_dir: Path = typer.Argument(..., help="a run directory (runs/<study>/<arm> or runs/<name>)"),
    out_dir: Path = typer.Argument(..., help="where to write the Hugging Face checkpoint"),
) -> None:
    """Write a plain Hugging Face checkpoint of a run's policy (LoRA merged) that
    AutoModelForCausalLM.from_pretrained loads."""
    from zoo.cli.export import export_run

    try:
        path = export_run(run_dir, out_dir)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e))
    console.print(f"wrote {path}")
