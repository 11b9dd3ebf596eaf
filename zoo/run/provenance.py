"""What a run records about where it came from (versions, model, seeds, git commit); peak memory is
`zoo.backends.train.memory`."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from zoo.run import threads

PACKAGES = (
    "variant-zoo",
    "torch",
    "transformers",
    "accelerate",
    "peft",
    "datasets",
    "wandb",
    "reasoning-gym",
    "math-verify",
)


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def git_commit(path: Path | None = None) -> str | None:
    """The project's git commit (with '-dirty' if the tree has changes), or None outside a checkout."""
    cwd = path or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        return sha.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(
    cfg: Any,
    source: Any,
    params: dict[str, Any],
    precision: dict[str, Any] | None = None,
    batch_sizes: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What config.yaml and summary.json record about the run's origin; `precision` is the resolved
    autocast (`zoo.run.precision.describe`: autocast, reason, cpu_capability); `batch_sizes` the resolved
    generation, evaluation and training batch sizes by key (`zoo.config.run.batch_sizes`)."""
    return {
        "versions": package_versions(),
        "git_commit": git_commit(),
        "model": {"name": source.name, "path": str(source.path), "kind": source.kind, "hash": source.content_hash},
        "parameters": params,
        "seed": cfg.seed,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
        "threads": threads.record(),  # the choice behind it: threads, wait_policy, source, why
        **({"precision": precision} if precision is not None else {}),
        **({"batch_sizes": batch_sizes} if batch_sizes is not None else {}),
    }


def batch_size_warnings(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """One line per batch size a resumed run changes: `old` and `new` are provenance records
    (config.yaml's `provenance`; an old record without `batch_sizes` gives none). The fingerprint
    leaves generation and evaluation batch sizes out (they do not change what is trained), but they
    change the sampled tokens, so the resumed run is not the uninterrupted one."""
    before, now = (old or {}).get("batch_sizes") or {}, new.get("batch_sizes") or {}
    return [
        f"resuming with {k} {now[k]} (the run so far used {before[k]}): the rows are split into other "
        f"generate calls, so the sampled tokens differ from the uninterrupted run's (random numbers drawn in "
        f"another order; under bf16 the numerics of a row depend on its batch)"
        for k in sorted(now)
        if k in before and before[k] != now[k]
    ]
