"""The `zoo` typer app and what its commands share: the consoles, one-line errors, `--set` parsing.

The commands register on `app` in `zoo.cli.inspect`, `zoo.cli.run` and `zoo.cli.bench`;
`zoo.cli.entry` imports them all and is the entry point. Every command that reads files reports
problems as `file: key: message` and exits 1.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from zoo.config.yaml_strict import MAX_NESTING, too_deep
from zoo.study.report.console_fit import PIPE_WIDTH

app = typer.Typer(
    help=(
        "Variant Zoo: RL post-training algorithms (PPO, GRPO, DAPO, MO-GRPO, ...) as named combinations of "
        "small components.\n\n"
        "Start with `zoo list` (every component and variant), `zoo show grpo`, `zoo diff grpo dapo`, then\n"
        "`zoo ablate experiments/quickstart.yaml` to run variants side by side."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Written to a log file or a pipe (not a terminal), tables keep their width instead of rich's 80 columns,
# which cut cells to "…" (the report's rule, zoo.study.report.console_fit); COLUMNS still wins where set.
console = (
    Console() if Console().is_terminal or os.environ.get("COLUMNS") else Console(width=PIPE_WIDTH)
)  # no file=: follows sys.stdout
err = Console(stderr=True)


def print_threads() -> None:
    """The process's thread choice (zoo.run.threads, made when zoo.cli was imported) as one line on stderr,
    once per process and only on rank 0 under a launcher."""
    global _THREADS_PRINTED
    from zoo.run import threads

    choice = threads.current()
    if choice is None or _THREADS_PRINTED or os.environ.get("RANK", "0") != "0":
        return
    _THREADS_PRINTED = True
    err.print(escape(choice.line()), highlight=False, soft_wrap=True)


_THREADS_PRINTED = False


def fail(msg: str, code: int = 1) -> None:
    """Print `error: msg` on stderr (one line, markup escaped) and exit with `code` (typer.Exit)."""
    err.print(f"[bold red]error:[/] {escape(str(msg))}", highlight=False, soft_wrap=True)  # a path stays copyable
    raise typer.Exit(code)


RUN_DIR_HOLDS = "config.yaml, metrics.jsonl, summary.json and checkpoint/"  # docs/reference/cli.md


def run_dir_problem(path: Path, what: str) -> str | None:
    """Why `path` is not a run folder that `what` (e.g. "--resume") can use, one line naming it, or
    None when it holds a config.yaml: the folder does not exist, is a file, or has no config.yaml
    (then what a run folder holds)."""
    if not path.exists():
        return f"{what} {path}: no such folder; give a run's output folder (e.g. runs/my-run)"
    if not path.is_dir():
        hint = f" (its folder: {path.parent})" if path.name == "config.yaml" else ""
        return f"{what} {path}: is a file, not a run folder{hint}"
    if not (path / "config.yaml").is_file():
        return (
            f"{what} {path}: the folder exists but has no config.yaml, so it is not a run folder; "
            f"a run folder (a run's output_dir) holds {RUN_DIR_HOLDS}"
        )
    return None


def print_json(obj: Any) -> None:
    """`obj` as indented JSON on stdout (`--json` output; anything else as its str)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """`["clip.eps_high=0.32", "kl=none"]` -> {"clip.eps_high": 0.32, "kl": "none"} (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for s in sets:
        if "=" not in s:
            fail(f"--set {s!r}: expected key=value, e.g. --set clip.eps_high=0.32")
        k, v = s.split("=", 1)
        try:
            out[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as e:
            fail(
                f"--set {s!r}: the value is not valid YAML ({str(e).splitlines()[0]}); quote strings and "
                "write lists as [a, b]"
            )
        except RecursionError:
            fail(f"--set {k.strip()}=...: the value is nested too deeply to read")
        if too_deep(out[k.strip()]) is not None:
            fail(f"--set {k.strip()}=...: the value nests more than {MAX_NESTING} levels of lists or mappings")
    return out


def quiet_logs() -> None:
    """Warnings only (transformers, datasets, HTTP clients: errors only), plus zoo.run.precision's one line."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for noisy in ("transformers", "datasets", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    logging.getLogger("zoo.run.precision").setLevel(logging.INFO)  # the run's one line: which autocast and why
