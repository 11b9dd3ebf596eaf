"""`zoo bench --strategy ddp|fsdp --nproc N` (zoo/bench/ranks.py, zoo/cli/bench.py): the per-rank
byte counts of weights, gradients and AdamW state are exact under a real 2-rank FSDP2 `fully_shard`
(one torchrun launch, tests/distributed/bench_ranks_worker.py) and under DDP; option parsing and the errors for
a strategy without processes. No timing asserts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_two_ranks
from typer.testing import CliRunner

from zoo.bench.ranks import bench_ranks, gather_rows
from zoo.bench.spec import BenchSpec
from zoo.cli import launch

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def rank_counts(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-ranks")
    run_two_ranks(HERE / "bench_ranks_worker.py", str(out), timeout=300)
    return {s: json.loads((out / f"{s}.json").read_text()) for s in ("ddp", "fsdp")}


@pytest.mark.dist
def test_ddp_rank_counts_are_the_full_model(rank_counts):
    """DDP: every rank holds everything. Per rank: weights = parameters + buffers (rotary inv_freq,
    not sharded); gradients = parameters; AdamW = exp_avg + exp_avg_sq (2 x parameters) + one fp32
    `step` scalar (4 bytes) per parameter tensor."""
    d = rank_counts["ddp"]
    full, n, buf = d["full"]["bytes"], d["full"]["tensors"], d["full"]["buffers"]
    for r in d["ranks"]:
        assert r["dtensor_params"] == 0
        assert (r["weights"], r["gradients"], r["optimizer"]) == (full + buf, full, 2 * full + 4 * n)


@pytest.mark.dist
def test_fsdp_rank_counts_are_local_shards_summing_to_the_full_model(rank_counts):
    """FSDP2: each rank counts its DTensor shards (`to_local()`). Exact by construction: the local
    shards of every parameter, gradient and moment add up to the full tensor over the 2 ranks; the
    buffers and the AdamW `step` scalars are plain tensors on every rank (counted twice). Uneven
    splits (the embedding's 105 rows: 53 + 52) make the two ranks differ slightly, so each rank's
    weights + gradients + optimizer is ~0.5 x DDP's (within 5%), not exactly."""
    d, ddp = rank_counts["fsdp"], rank_counts["ddp"]
    full, n, buf = d["full"]["bytes"], d["full"]["tensors"], d["full"]["buffers"]
    rows = d["ranks"]
    assert all(r["dtensor_params"] == n for r in rows)  # every parameter is sharded
    assert sum(r["gradients"] for r in rows) == full
    assert sum(r["weights"] for r in rows) == full + 2 * buf
    assert sum(r["optimizer"] for r in rows) == 2 * full + 2 * 4 * n
    assert rows[0]["gradients"] != rows[1]["gradients"]  # 53 vs 52 rows: the split is uneven
    ddp_state = sum(ddp["ranks"][0][k] for k in ("weights", "gradients", "optimizer"))
    for r in rows:
        ratio = sum(r[k] for k in ("weights", "gradients", "optimizer")) / ddp_state
        assert 0.45 < ratio < 0.55, ratio


def test_gather_rows_sums_state_and_takes_the_slowest_rank():
    """Rank rows of state 3 + 5 MB -> 8 MB summed; the largest peak (20) and the slowest step by each
    rank's own wall time (2.5, not the ranks' mean step_s 2.0); step_s where wall_s is missing."""
    rows = [
        {"rank": 0, "state_mb": 3.0, "peak_mb": 10.0, "step_s": 2.0, "wall_s": 1.5},
        {"rank": 1, "state_mb": 5.0, "peak_mb": 20.0, "step_s": 2.0, "wall_s": 2.5},
    ]
    g = gather_rows(rows, "fsdp")
    assert (g["world_size"], g["state_sum_mb"], g["peak_max_mb"], g["step_max_s"]) == (2, 8.0, 20.0, 2.5)
    assert gather_rows([{**r, "wall_s": None} for r in rows], "ddp")["step_max_s"] == 2.0


def test_bench_ranks_without_a_launcher_is_refused(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match=r"--strategy fsdp runs under a launcher: add --nproc N"):
        bench_ranks(BenchSpec(strategy="fsdp"))


def test_bench_strategy_is_the_runs_training_strategy(tmp_path):
    from zoo.bench.spec import run_config

    assert run_config(BenchSpec(strategy="ddp"), tmp_path).training.strategy == "ddp"
    assert BenchSpec(strategy="fsdp").label().endswith(" fsdp")


def test_bench_nproc_relaunches_under_torchrun_without_nproc():
    cmd = launch.torchrun_command(2, ["bench", "grpo", "--strategy", "fsdp", "--nproc", "2", "--steps", "1"])
    assert cmd[1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "zoo.cli",
        "bench",
        "grpo",
        "--strategy",
        "fsdp",
        "--steps",
        "1",
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--strategy", "fsdp"], "--strategy fsdp needs processes: add --nproc N"),
        (["--strategy", "ddp"], "--strategy ddp needs processes: add --nproc N"),
        (["--strategy", "zero3", "--nproc", "2"], "--strategy 'zero3': use one of single, ddp, fsdp"),
        (["--nproc", "2"], "--nproc 2 with --strategy single"),
        (["--strategy", "fsdp", "--nproc", "2", "--memory"], "not with --vs, --memory or --scan"),
        (["--autocast", "fp16"], "--autocast fp16 is not supported"),
    ],
)
def test_bench_strategy_options_are_checked_before_launching(monkeypatch, args, message):
    """Each bad combination exits 1 with its one-line error, and nothing is launched."""
    import zoo.cli.bench  # noqa: F401  (registers the command)
    from zoo.cli import app

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(launch, "relaunch", lambda *a: pytest.fail("launched despite bad options"))
    r = CliRunner().invoke(app, ["bench", "grpo", *args])
    assert r.exit_code == 1 and message in " ".join(r.output.split()), r.output


def test_per_rank_table_prints_every_rank_untruncated(capsys):
    """The table fits an 80-column console (no cell cut to '…') and shows each rank's w+g+o:
    weights 512 + gradients 256 + optimizer 512 MB = 1280 MB = 1.25 GB."""
    from zoo.cli.bench import print_ranks

    row = {
        "wall_s": 40.05,
        "step_s": 40.0,
        "train_s": 22.1,
        "weights_mb": 512.0,
        "gradients_mb": 256.0,
        "optimizer_mb": 512.0,
        "runtime_mb": 280.0,
        "activations_mb": 1600.0,
        "peak_mb": 3160.0,
    }
    rows = [{"rank": r, **row, "state_mb": 1280.0} for r in (0, 1)]
    spec = {
        "variant": "grpo",
        "model": "m",
        "prompts": 2,
        "group_size": 2,
        "max_new_tokens": 16,
        "lora": False,
        "autocast": "bf16",
        "micro_batch": 2,
        "steps": 2,
        "warmup": 1,
    }
    print_ranks({"spec": spec, "distributed": gather_rows(rows, "fsdp")})
    out = capsys.readouterr().out
    assert "…" not in out
    lines = [ln for ln in out.splitlines() if "40.05" in ln and "│" in ln]  # the table rows
    assert len(lines) == 2 and all("1.25" in ln and "3.09" in ln for ln in lines), out
