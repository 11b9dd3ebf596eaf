"""Each configuration of a comparison in its own process (`python -m zoo.bench SPEC.json OUT.json`,
`python -m zoo.bench.trl ...`), so that every number is that process's own peak. Set
`ZOO_BENCH_LOCK=/path/to/lockfile` to run each worker under `flock` (serialises benchmark workers
with other heavy jobs on a shared machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from zoo.bench.precheck import worker_error
from zoo.bench.spec import BenchSpec


def worker_env() -> dict[str, str]:
    """The environment of a worker: offline Hub, datasets and W&B (unless set), and this checkout's
    root first on PYTHONPATH (the worker imports the same zoo)."""
    env = dict(os.environ)
    for k, v in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("HF_DATASETS_OFFLINE", "1"),
        ("WANDB_MODE", "disabled"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ):
        env.setdefault(k, v)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_worker(module: str, spec: dict[str, Any], *, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run `python -m <module> SPEC.json OUT.json` in a fresh process (under `flock $ZOO_BENCH_LOCK`
    when set); returns OUT's JSON. Raises RuntimeError, one line naming the worker's label (variant,
    mode, autocast) and the exception it ended with (`zoo.bench.precheck.worker_error`), when it fails."""
    with tempfile.TemporaryDirectory(prefix="zoo-bench-w-") as tmp:
        sp, op = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        sp.write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", module, str(sp), str(op)]
        lock = os.environ.get("ZOO_BENCH_LOCK")
        if lock:
            cmd = ["flock", lock] + cmd
        if log:
            log(f"worker: {module} {spec.get('label', '')}")
        proc = subprocess.run(cmd, env=worker_env(), capture_output=True, text=True)
        if proc.returncode != 0 or not op.exists():
            what = f"{module} {spec.get('label', '')}".strip()
            raise RuntimeError(
                f"benchmark worker {what} failed (exit {proc.returncode}): "
                f"{worker_error(proc.stderr or '') or 'no error message'}"
            )
        return json.loads(op.read_text())


def bench_in_subprocess(spec: BenchSpec, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`run_bench(spec)` in its own process (`python -m zoo.bench`): the peak memory is its own."""
    d = asdict(spec)
    d["label"] = spec.label()
    return run_worker("zoo.bench", d, log=log)
