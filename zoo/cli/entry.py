"""The `zoo` command: the app with every command registered, and the console-script entry point
(`zoo = "zoo.cli:main"`, re-exported by `zoo/cli/__init__.py`; `python -m zoo.cli` runs it too)."""

from __future__ import annotations

import os

import typer
from rich.markup import escape

# each registers its commands on the app; this order is the order `zoo --help` lists them in
from zoo.cli import (
    bench,  # noqa: F401,I001
    inspect,  # noqa: F401,I001
    rm,  # noqa: F401,I001
    run,  # noqa: F401,I001
    tta,  # noqa: F401,I001
)
from zoo.cli.common import app, console, err

__all__ = ["app", "main"]


def _print_version(value: bool) -> None:
    if value:
        from zoo.core.version import VERSION

        console.print(f"zoo {VERSION}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    pass


def main() -> None:
    """Console-script entry point. Configuration and input errors, and file-system errors (disk full,
    permissions), are printed as one line `error: ...` with exit status 1 (set ZOO_DEBUG=1 for the
    traceback)."""
    try:
        app()
    except SystemExit as e:
        if e.code in (130, 143):  # interrupted (zoo.cli.stopping.interrupt_code): end now
            from zoo.cli.stopping import skip_final_collection

            skip_final_collection()
        raise
    except (
        ValueError,
        KeyError,
        FileNotFoundError,
        FileExistsError,
        NotADirectoryError,
        ModuleNotFoundError,
        RecursionError,
    ) as e:  # VariantError, ComponentError, TaskError, ReportError are ValueErrors
        if os.environ.get("ZOO_DEBUG"):
            raise
        err.print(f"[bold red]error:[/] {escape(str(e) or type(e).__name__)}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    except OSError as e:  # disk full, read-only folder, permissions: zoo.core.faults names the file
        if os.environ.get("ZOO_DEBUG"):
            raise
        from zoo.core.faults import os_error_message

        err.print(f"[bold red]error:[/] {escape(os_error_message(e))}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
