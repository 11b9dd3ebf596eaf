"""`zoo run | ablate | report | export` (registered on `zoo.cli.common.app`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import List, Optional

import typer

from zoo.cli.common import app, console, fail, parse_sets, print_threads, quiet_logs, run_dir_problem


def _sigterm_as_interrupt() -> None:
    """SIGTERM (a scheduler's `kill`, SLURM's time limit) stops a run like Ctrl-C: the run is marked
    interrupted, its last checkpoint kept, and the resume command printed; zoo.run.stop_watchdog ends a
    process still alive GRACE_S seconds later (a native call that never yields, an interrupt swallowed)."""
    import signal
    import threading

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def _stop_always() -> None:
    """SIGTERM as Ctrl-C (`_sigterm_as_interrupt`), and zoo.run.stop_watchdog while the command runs
    (`_uninstalls_watchdog` ends it)."""
    from zoo.run import stop_watchdog

    _sigterm_as_interrupt()
    stop_watchdog.install()  # a process that does not stop within its grace is ended anyway


def _uninstalls_watchdog(command):
    """Wrap a command so the watchdog `_stop_always` started ends with it, however it ends (typer gives
    the callback no click context to close on, so a command run in-process, as the tests and CliRunner
    do, would leave it armed: a later SIGTERM to that process then ended it 15 s on)."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from zoo.run import stop_watchdog

        try:
            return command(*args, **kwargs)
        finally:
            stop_watchdog.uninstall()

    return wrapper


def interrupt_code(e: BaseException) -> int:
    """The exit status of an interrupted command, the shell's 128 + signal: 143 for SIGTERM (raised as
    KeyboardInterrupt("signal 15") by `_sigterm_as_interrupt`), 130 for Ctrl-C."""
    text = str(e)
    if text.startswith("signal ") and text[7:].isdigit():
        return 128 + int(text[7:])
    return 130


def name_refused_file(src: Path | None, e: BaseException) -> None:
    """Print `SRC: refused` before a config error that does not name its file (the checks name keys)."""
    if src is not None and str(src) not in str(e):
        from rich.markup import escape

        from zoo.cli.common import err

        err.print(f"{escape(str(src))}: refused", highlight=False, soft_wrap=True)


@app.command()
@_uninstalls_watchdog
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

    Every YAML key, its default and what it does: docs/reference/run-file.md (example: examples/run_grpo.yaml).
    """
    import sys

    import torch

    from zoo.cli import launch
    from zoo.config.variant import VariantError
    from zoo.study.run_file import load_run_config

    if nproc is not None and not launch.launched():
        if nproc > 1 and config is not None and resume is None:  # refuse before torchrun starts N copies of the error
            from zoo.checks import before_load

            try:
                cfg = load_run_config(config, parse_sets(set_))
            except VariantError as e:
                fail(str(e))
            if cfg.training.strategy == "single":
                fail(
                    f"--nproc {nproc} with training.strategy single: nothing would combine the ranks' gradients; "
                    "add --set training.strategy=ddp (or fsdp)"
                )
            errors = before_load(cfg, world_size=nproc, launched=True)[0].errors  # what each rank would refuse
            if errors:
                fail("\n".join(errors))
        raise typer.Exit(launch.relaunch(nproc, sys.argv[1:]))
    quiet_logs()
    print_threads()
    _stop_always()
    if threads:
        torch.set_num_threads(threads)
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
            cfg = load_run_config(resume / "config.yaml", {**parse_sets(set_), "output_dir": str(resume)})
        elif config is None:
            fail("give a run YAML (zoo run run.yaml) or --resume RUN_DIR")
        else:
            cfg = load_run_config(config, parse_sets(set_))
    except VariantError as e:
        fail(str(e))
    from zoo.backends.train.checkpoint import CheckpointError
    from zoo.core.faults import os_error_message
    from zoo.core.guards import RunFailed
    from zoo.run.trainer import train

    try:
        summary = train(cfg, resume=not fresh)
    except (VariantError, CheckpointError) as e:
        name_refused_file(config if config is not None else resume / "config.yaml" if resume is not None else None, e)
        fail(str(e))
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
@_uninstalls_watchdog
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
    """
    import torch

    from zoo.config.variant import VariantError
    from zoo.study import experiment, runner

    quiet_logs()
    print_threads()
    _stop_always()
    if threads:
        torch.set_num_threads(threads)
    if write_configs and not dry_run:
        fail("--write-configs goes with --dry-run (a study that runs writes each arm's config.yaml anyway)")
    sh = None
    if shard:
        try:
            i, n = (int(x) for x in shard.split("/"))
            assert 0 <= i < n
            sh = (i, n)
        except (ValueError, AssertionError):
            fail(f"--shard {shard!r}: expected i/n with 0 <= i < n, e.g. 0/4")
    try:
        st = experiment.load_study(study, overrides=parse_sets(set_))
        run_arms = None
        if ray or ray_address:
            from functools import partial

            from zoo.study import ray_runner

            ray_runner.import_ray()  # before any arm is planned: without Ray, say how to install it
            run_arms = partial(ray_runner.run_arms_on_ray, address=ray_address, resources=st.resources, threads=threads)
        code = runner.run_study(
            st,
            dry_run=dry_run,
            write_configs=write_configs,
            shard=sh,
            console=console,
            fresh=tuple(fresh),
            run_arms=run_arms,
        )
    except VariantError as e:
        name_refused_file(study, e)
        fail(str(e))
    except OSError as e:  # disk full, read-only folder: one line naming the file (zoo.core.faults)
        from zoo.core.faults import os_error_message

        fail(os_error_message(e))
    except KeyboardInterrupt as e:
        import shlex

        pending = getattr(e, "pending_fresh", fresh)  # --fresh arms not reached yet keep their --fresh
        again = shlex.join(
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
        fail(
            f"interrupted; finished arms are kept and the interrupted one resumes from its last checkpoint: {again}",
            interrupt_code(e),
        )
    raise typer.Exit(code)


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
