"""The `zoo` command line, one module per group of commands on one typer app.

`common` (the app, consoles, one-line errors, `--set` parsing), `inspect` (list, show, diff,
validate), `run` (run, ablate, report, export), `bench`, `rm` (rm train, rm pairs); `entry` registers
them all and holds the console script's `main`. `app` and `main` are re-exported here: `zoo = "zoo.cli:main"`, and
`from zoo.cli import app` gives the app with every command.

Importing this package first chooses the CPU threads and the OpenMP wait policy (`zoo.run.threads.apply`),
before any command imports torch: the console script, `python -m zoo.cli` and torchrun's ranks all
import it first. `zoo/__init__.py` must stay free of torch for this to work.
"""

from zoo.run import threads as _threads

_threads.apply()

from zoo.cli.entry import app, main  # noqa: E402

__all__ = ["app", "main"]
