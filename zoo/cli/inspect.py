"""`zoo list | show | diff | validate` (registered on `zoo.cli.common.app`): the registry and files, no model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from zoo.cli.common import app, console, fail, parse_sets, print_json

# --------------------------------------------------------------------------- list / show / diff


@app.command("list")
def list_cmd(
    kind: Optional[str] = typer.Argument(None, help="a component kind (clip, advantage, ...) or 'variants'"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """List registered components (by kind), named variants, and (without a kind) the task loaders and
    the models built in (the run file's task.name and model)."""
    from zoo.config import variant
    from zoo.core import registry
    from zoo.models.sources import BUILTIN_MODELS
    from zoo.tasks import known_tasks

    try:
        comps = registry.available()
        variants = variant.available_variants()
        if kind not in (None, "variants"):
            comps = {kind: registry.available(kind)}
    except (registry.ComponentError, variant.VariantError) as e:
        fail(str(e))
    if as_json:
        out: dict[str, Any] = {} if kind == "variants" else dict(comps)
        if kind is None:
            out["tta"] = tta_listing()
        if kind in (None, "variants"):
            out["variants"] = variants
        if kind is None:
            out.update(tasks=known_tasks(), models=list(BUILTIN_MODELS))
        print_json(out)
        return
    from zoo.core import kinds

    table = Table(title="Variant Zoo registry", show_lines=False)
    table.add_column("kind", style="bold cyan")
    table.add_column("slot", style="dim")
    table.add_column("names")
    if kind != "variants":
        for row in kinds.TABLE:  # the slot table's order; `kl` is a setting, listed with its estimators
            if row.kind in comps:
                table.add_row(row.kind, row.place(), ", ".join(comps[row.kind]) or "-")
    if kind is None:
        t = tta_listing()
        what = f"policy {', '.join(t['policy_sources'])}; images {', '.join(t['images'])} (shifts {', '.join(t['shifts'])})"
        table.add_row("zoo tta", "not a slot: a `zoo tta` file's keys", f"{what}; method {', '.join(t['methods'])}")
    if kind in (None, "variants"):
        table.add_row("variants", "", ", ".join(variants))
    if kind is None:
        table.add_row("tasks", "not a slot: the run file's task.name", ", ".join(known_tasks()))
        table.add_row("models", "not a slot: built in (run file's model)", ", ".join(BUILTIN_MODELS))
    console.print(table)


def tta_listing() -> dict[str, list[str]]:
    """What a `zoo tta` file can name besides registered components (zoo.config.tta): its policy sources
    (`policy.source`), image sets (`data.name`), their shifts (`data.shift`) and `method`s."""
    from typing import get_args

    from zoo.config.tta import DataSpec, PolicySpec, TTASpec

    def lit(model: Any, key: str) -> list[str]:
        return list(get_args(model.model_fields[key].annotation))

    return {
        "policy_sources": lit(PolicySpec, "source"),
        "images": lit(DataSpec, "name"),
        "shifts": lit(DataSpec, "shift"),
        "methods": lit(TTASpec, "method"),
    }


def _load_variant(name: str, sets: list[str] | None = None):
    from zoo.config import variant

    try:
        return variant.load_variant(name, parse_sets(sets or []))
    except variant.VariantError as e:
        fail(str(e))


@app.command()
def show(
    name: str = typer.Argument(..., help="a variant name or YAML file, or any registered component (zoo list)"),
    set_: List[str] = typer.Option([], "--set", help="dotted override, e.g. clip.eps_high=0.32 (repeatable)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show a variant's resolved slots with every parameter and its source, or a registered component's
    kind, parameters with defaults, source and docstring."""
    from zoo.cli.components import is_variant, kinds_of, show_component

    if not is_variant(name) and (kinds := kinds_of(name)):
        if set_:
            fail(f"--set applies to variants; {name!r} is a registered {kinds[0]}")
        show_component(name, kinds, console, as_json)
        return
    v = _load_variant(name, set_)
    resolved = v.resolved()
    if as_json:
        print_json(
            {
                "name": v.name,
                "paper": v.paper,
                "summary": v.summary,
                "file": v.path,
                "group_size": v.group_size,
                "updates": v.updates.model_dump(),
                **({"critic_warmup": v.critic_warmup} if v.critic_warmup else {}),
                "slots": resolved,
                "sources": v.sources,
            }
        )
        return
    console.print(f"[bold]{v.name}[/]  {v.paper}\n{v.summary}\n[dim]{v.path}[/]")
    table = Table(show_lines=True)
    table.add_column("slot", style="bold cyan")
    table.add_column("value")
    table.add_column("source", style="dim")
    table.add_row("group_size", str(v.group_size), v.sources.get("group_size", ""))
    table.add_row(
        "updates", f"epochs {v.updates.epochs} x minibatches {v.updates.minibatches}", v.sources.get("updates", "")
    )
    if v.critic_warmup:
        table.add_row("critic_warmup", f"{v.critic_warmup} steps (critic only)", v.sources.get("critic_warmup", ""))
    for slot, val in resolved.items():
        table.add_row(slot, _fmt_spec(val), v.sources.get(slot, ""))
    console.print(table)


def _fmt_spec(val: Any) -> str:
    if val is None:
        return "-"
    if isinstance(val, list):
        return "\n".join(_fmt_spec(x) for x in val) or "[]"
    if isinstance(val, dict):
        if "placement" in val:
            if val["placement"] == "none":
                return "none"
            ad = val.get("adaptive")
            extra = f", adaptive target {ad['target']} horizon {ad['horizon']}" if ad else ""
            return f"{val['placement']}: {val['estimator']}, beta {val['beta']}{extra}"
        params = ", ".join(f"{k}={_fmt_spec(v) if isinstance(v, dict) else v}" for k, v in val.items() if k != "name")
        if "name" not in val:  # a settings block (distill:)
            return params
        return f"{val['name']}" + (f" ({params})" if params else "")
    return str(val)


@app.command()
def diff(
    a: str = typer.Argument(..., help="first variant"),
    b: str = typer.Argument(..., help="second variant"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print every resolved setting in which two variants differ."""
    from zoo.cli.components import not_a_variant
    from zoo.config import diff as checks

    for x in (a, b):
        if msg := not_a_variant(x, "zoo diff"):
            fail(msg)
    va, vb = _load_variant(a), _load_variant(b)
    rows = checks.diff_variants(va, vb)
    if as_json:
        print_json([{"key": k, a: x, b: y} for k, x, y in rows])
        return
    if not rows:
        console.print(f"{a} and {b} resolve to the same settings")
        return
    table = Table(title=f"{a} vs {b}")
    table.add_column("setting", style="bold cyan")
    table.add_column(a)
    table.add_column(b)
    for k, x, y in rows:
        table.add_row(k, "-" if x is None else str(x), "-" if y is None else str(y))
    console.print(table)


# --------------------------------------------------------------------------- validate


@app.command()
def validate(
    files: List[Path] = typer.Argument(..., help="variant, run or study YAML files"),
    set_: List[str] = typer.Option(
        [],
        "--set",
        help="dotted override, applied as the command that runs the file applies it: "
        "zoo run (a run file), zoo ablate (a study), zoo show (a variant); e.g. budget.steps=3 (repeatable)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list of {file, ok, errors, warnings, notes}"),
    nproc: Optional[int] = typer.Option(
        None,
        "--nproc",
        min=1,
        help="check as `zoo run --nproc N` would run it "
        "(N processes under a launcher); default: as `zoo run` in this process",
    ),
) -> None:
    """Check variant, run and study files without loading any weights, with the checks `zoo run` makes
    (zoo.checks; the model's config.json and tokenizer are read when local). Exit 1 if any has an error."""
    from zoo.cli.validate_file import check_file

    sets = parse_sets(set_)
    results = [(str(f), check_file(f, sets, nproc)) for f in files]
    if as_json:
        print_json(
            [{"file": f, "ok": r.ok, "errors": r.errors, "warnings": r.warnings, "notes": r.notes} for f, r in results]
        )
    else:
        for f, r in results:
            status = "[green]ok[/]" if r.ok else "[red]invalid[/]"
            console.print(f"{status} {f}", highlight=False)
            for e in r.errors:
                console.print(f"  [red]error:[/] {escape(e)}", highlight=False)
            for w in r.warnings:
                console.print(f"  [yellow]warning:[/] {escape(w)}", highlight=False)
            for n in r.notes:
                console.print(f"  [blue]note:[/] {escape(n)}", highlight=False)
    if not all(r.ok for _, r in results):
        raise typer.Exit(1)
