"""`zoo bench --async K` on the tiny model: the synchronous step, then async at each k, side by side
with the staleness reached and the waits; bad --async values are refused with one line. No timed
assertions (the numbers are whatever this machine measures)."""

from __future__ import annotations

import json

from test_bench import TINY_TASK
from typer.testing import CliRunner

from zoo.cli.bench_options import parse_async


def test_parse_async():
    assert parse_async(None) == [] and parse_async("1,2") == [1, 2] and parse_async("0") == [0]
    for bad in ("x", "-1", ","):
        try:
            parse_async(bad)
        except ValueError as e:
            assert "--async" in str(e) and "k >= 0" in str(e)
        else:
            raise AssertionError(bad)


def test_bench_async_runs_sync_then_each_k(tiny_model_dir):
    import zoo.cli.bench  # noqa: F401  (registers the command)
    from zoo.cli import app

    args = ["bench", "grpo", "--model", str(tiny_model_dir), "--task", json.dumps(TINY_TASK), "--prompts", "2"]
    args += ["--group-size", "2", "--max-new-tokens", "6", "--steps", "3", "--micro-batch", "4", "--threads", "1"]
    res = CliRunner().invoke(app, [*args, "--async", "1", "--json"])
    assert res.exit_code == 0, res.output
    runs = json.loads(res.stdout)["backends"]
    assert [r["spec"]["max_staleness"] for r in runs] == [None, 1]
    assert "async/staleness_mean" not in runs[0]["metrics"]
    assert 0.0 <= runs[1]["metrics"]["async/staleness_mean"] <= 1.0  # the median over the measured steps
    assert runs[1]["metrics"]["async/generate_s"] > 0
    r = CliRunner().invoke(app, ["bench", "grpo", "--async", "x"])
    assert r.exit_code == 1 and "--async 'x'" in r.output


def test_too_many_async_workers_and_a_repeated_k_are_refused_before_anything_runs():
    import pytest

    from zoo.cli import app
    from zoo.cli.bench_options import check_async_workers

    check_async_workers([0, 2], 1, 1)  # 1 <= 1 x (0 + 1)
    with pytest.raises(
        ValueError, match=r"--async-workers 2: at most --prompts x \(k \+ 1\) = 1 x 1 = 1 for --async k = 0"
    ):
        check_async_workers([2, 0], 2, 1)
    with pytest.raises(ValueError, match="a k repeats"):
        parse_async("1,1")
    # the CLI refuses at once (no model load: the default model is never read)
    r = CliRunner().invoke(app, ["bench", "grpo", "--async", "0", "--prompts", "1"])
    assert r.exit_code == 1 and "--async-workers 2: at most" in r.output
