"""Checks of a bench before any worker starts (`check_bench`): every variant name and the run each
would train (zoo.run.trainer.validate_run: the before_load checks of zoo.checks), and a reward-model path that
does not exist. A comparison (`zoo bench --memory ppo grpoo`) then fails at once, in one line, rather
than after the first workers ran; `worker_error` turns a worker that still fails into one line."""

from __future__ import annotations

import re
import tempfile
from dataclasses import replace
from typing import Sequence

from zoo.bench.spec import BenchSpec, run_config


def check_bench(spec: BenchSpec, variants: Sequence[str]) -> None:
    """Raise ValueError (VariantError) for the first of `variants` whose run would not start:
    an unknown variant (the message lists the known ones, with a did-you-mean), a bad `--set`,
    a reward that does not resolve, or a `reward_model` path that does not exist (a bench cannot
    build it; zoo.rewards.reward_model.missing_models). No model is loaded."""
    from zoo.rewards.reward_model import missing_models
    from zoo.run.trainer import validate_run

    missing = missing_models(spec.rewards)
    if missing:
        raise ValueError(
            missing[0].split(" does not exist")[0] + " does not exist: give --reward-model an existing "
            "directory (zoo rm train writes one) or an HF id"
        )
    with tempfile.TemporaryDirectory(prefix="zoo-bench-check-") as tmp:
        for v in dict.fromkeys(variants):
            validate_run(run_config(replace(spec, variant=v), tmp))


_FRAME = re.compile(r"^(\s+File |\s{4}|\s*[\^~]+\s*$)")


def worker_error(stderr: str) -> str:
    """The exception a failed worker ended with, as one line ("FileNotFoundError: model directory not
    found: /nope"): the lines after the frames of the last traceback in `stderr`, joined; without a
    traceback the last non-empty line; "" for an empty stderr."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        rest = [line.strip() for line in lines if line.strip()]
        return rest[-1] if rest else ""
    tail = lines[starts[-1] + 1 :]
    i = 0
    while i < len(tail) and _FRAME.match(tail[i]):
        i += 1
    return " ".join(line.strip() for line in tail[i:] if line.strip())
