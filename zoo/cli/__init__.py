"""The `zoo` command line, one module per group of commands on one typer app.

`common` (the app, consoles, one-line errors, `--set` parsing), `inspect` (list, show, diff,
validate), `run` (run, ablate, report, export), `bench`, `rm` (rm train, rm pairs); `entry` registers
them all and holds the console script's `main`. `app` and `main` are re-exported here: `zoo = "zoo.cli:main"`, and
`from zoo.cli import app` gives the app with every command.
"""
from zoo.cli.entry import app, main

__all__ = ["app", "main"]
