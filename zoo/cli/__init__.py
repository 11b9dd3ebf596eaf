"""The `zoo` command line, one module per group of commands on one typer app.

`app` (the app, consoles, one-line errors, `--set` parsing), `inspect` (list, show, diff, validate),
`run` (run, ablate, report, export), `bench`; `main` registers them all and is the entry point.
"""
