"""`zoo tta FILE`: test-time adaptation of a `dual_encoder` policy (issue 32 §3; zoo.run.tta).

It is a command of its own, not `zoo run`: a dual encoder has no token batch, so the LM step
(zoo/step/pipeline.py) does not apply; the update reuses the variant's components through
zoo.step.tta instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from zoo.cli.common import app, console, fail


@app.command()
def tta(
    config: Path = typer.Argument(..., help="a `zoo tta` file (a top-level `tta:` mapping)"),
    out: Optional[Path] = typer.Option(None, "--out", help="write result.json (summary and per-image records) here"),
) -> None:
    """Adapt a dual encoder to each test image in turn and print zero-shot and adapted accuracy.

    Example: zoo tta examples/tta_grpo.yaml --out runs/tta
    A file with a `study:` mapping (experiments/grpo_tta.yaml) runs every arm on every shift, severity
    and seed and writes report.md (accuracy with 95% intervals, paired differences) and result.json.
    Every key, its default and its source (paper, RLCF or ours): docs/reference/grpo-tta.md."""
    from zoo.checks.tta import check_tta_data
    from zoo.config.variant_files import read_yaml_file
    from zoo.run.tta import TTADiverged, run_tta

    rep, f = check_tta_data(read_yaml_file(config), str(config))
    for w in rep.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    if f is None:
        fail("\n".join(rep.errors))
    _check_out(out)
    try:
        if f.study is not None:
            return _study(f, config, out)
        result = run_tta(f.tta)
    except TTADiverged as e:
        fail(f"{config}: {e}")
    s = result.summary()
    console.print(
        f"{f.name}: {s['images']} images, zero-shot accuracy {s['zero_shot_accuracy']:.3f}, "
        f"adapted {s['accuracy']:.3f} ({f.tta.variant if f.tta.method == 'variant' else 'tpt'}, "
        f"adapt {f.tta.adapt}; {s['seconds']:.1f} s)",
        highlight=False,
    )
    dest = out or (Path(f.out) if f.out else None)
    if dest is not None:
        dest.mkdir(parents=True, exist_ok=True)
        record = {"name": f.name, "config": f.model_dump(), **s, "records": result.records}
        (dest / "result.json").write_text(json.dumps(record, indent=1) + "\n")
        console.print(f"wrote {dest / 'result.json'}", highlight=False)


def _check_out(out: Optional[Path]) -> None:
    """Refuse an --out that is an existing file before any work runs (it would fail only at the end)."""
    if out is not None and out.exists() and not out.is_dir():
        fail(f"--out {out}: a file exists there; give a folder (it is created when missing)")


def _study(f, config: Path, out: Optional[Path]) -> None:
    """`zoo tta STUDY`: every arm x condition x seed (zoo.study.tta_study); writes report.md and result.json."""
    from zoo.study.tta_study import run_tta_study, tta_study_report

    dest = out or Path(f.out or f"runs/{f.name}")
    res = run_tta_study(f, str(config), log=lambda line: console.print(line, highlight=False))
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "result.json").write_text(json.dumps(res.to_json(), indent=1) + "\n")
    (dest / "report.md").write_text(tta_study_report(res, f"zoo tta {config} --out {dest}"))
    console.print(
        f"{f.name}: {res.seconds:.0f} s; wrote {dest / 'report.md'} and {dest / 'result.json'}", highlight=False
    )


def ablate_tta(config: Path, dry_run: bool) -> int:
    """`zoo ablate` on a `zoo tta` study file (experiments/grpo_tta.yaml): the plan (every arm x seed, as
    `zoo ablate` labels them, and the conditions) with --dry-run, else the study as `zoo tta FILE` runs it.
    Returns the exit status; a refused file is one line."""
    from zoo.checks.tta import check_tta_data
    from zoo.config.tta import study_arms
    from zoo.config.variant_files import read_yaml_file
    from zoo.study.tta_study import ZERO_SHOT, cond_label, study_conditions

    rep, f = check_tta_data(read_yaml_file(config), str(config))
    for w in rep.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    if f is None:
        fail("\n".join(rep.errors))
    if f.study is None:
        fail(f"{config}: a `zoo tta` file without a `study:` mapping is one run: `zoo tta {config}`")
    if not dry_run:
        from zoo.run.tta import TTADiverged

        try:
            _study(f, config, None)
        except TTADiverged as e:
            fail(f"{config}: {e}")
        return 0
    arms = [ZERO_SHOT] + [name for name, _ in study_arms(f, str(config))]
    conds = [cond_label(c) for c in study_conditions(f)]
    console.print(
        f"study {f.name} (zoo tta): {len(arms)} arm(s) x {len(f.study.seeds)} seed(s) x {len(conds)} condition(s)",
        highlight=False,
    )
    for a in arms:
        console.print("  " + " ".join(f"{a}-s{s}" for s in f.study.seeds), highlight=False)
    console.print(f"  conditions: {', '.join(conds)}", highlight=False)
    console.print(f"dry run: nothing written; run it with `zoo ablate {config}` or `zoo tta {config}`", highlight=False)
    return 0
