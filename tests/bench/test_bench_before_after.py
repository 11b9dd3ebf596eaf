"""bench/bench_before_after.sh refuses a missing, `--help` or unknown COMMIT with its usage line, before it
creates a worktree or an output folder (it used to hand `--help` to `git worktree add`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_before_after.sh"


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("git") is None, reason="needs bash and git")
@pytest.mark.parametrize("args", [[], ["--help"], ["-h"], ["no-such-commit-xyz"]])
def test_usage_and_a_bad_commit_stop_before_any_work(tmp_path, args):
    out = tmp_path / "out"
    r = subprocess.run(
        ["bash", str(SCRIPT), *args, str(out)] if args else ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "usage: bash bench/bench_before_after.sh COMMIT" in r.stderr
    assert not out.exists()
