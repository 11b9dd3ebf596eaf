"""The decode bound of `zoo bench` (zoo/bench/bound.py, decode.py) and `--backend`: the arithmetic on a
hand case, the probe's decode-step count on the tiny model, the option parsing, and a side-by-side
run that prints the decode columns. No timing asserts: the rates are whatever this machine measures."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from zoo.bench.bound import copy_bandwidth, decode_bound, decode_work, matmul_rate, model_dims
from zoo.bench.decode import decode_summary

TINY_TASK = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "size": 32,
    "eval_size": 4,
    "fewshot": 0,
    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
}
DIMS = {"params": 1000.0, "weight_bytes": 4000.0, "layers": 2.0, "q_dim": 8.0, "kv_dim": 4.0}


def test_decode_work_and_bound_on_a_hand_case():
    # 3 decode steps of 2 rows attending to 5, 6, 7 positions: rows = 6, rows_ctx = 2 * (5 + 6 + 7) = 36
    # FLOPs = 2 * 1000 * 6 + 4 * 2 layers * 8 q_dim * 36 = 12000 + 2304 = 14304
    # bytes = 3 steps * 4000 + 2 (K, V) * 2 layers * 4 kv_dim * 36 * 2 bytes (bf16) = 12000 + 1152 = 13152
    w = decode_work(DIMS, steps=3, rows=6, rows_ctx=36, kv_elem_bytes=2)
    assert w == {"flops": 14304.0, "bytes": 13152.0}
    # 1e4 FLOP/s and 1e4 B/s: compute 1.4304 s > memory 1.3152 s -> compute-bound, 1.4304 s
    b = decode_bound(w["flops"], w["bytes"], 1e4, 1e4)
    assert b["limit"] == "compute" and b["seconds"] == pytest.approx(1.4304) and b["memory_s"] == pytest.approx(1.3152)
    # half the bandwidth: memory 2.6304 s > 1.4304 s -> memory-bound
    b = decode_bound(w["flops"], w["bytes"], 1e4, 5e3)
    assert b["limit"] == "memory" and b["seconds"] == pytest.approx(2.6304)
    with pytest.raises(ValueError, match="rates must be > 0"):
        decode_bound(1.0, 1.0, 0.0, 1.0)


def test_decode_summary_rates_and_distance():
    # two training steps recorded (medians: 3 steps, 6 rows, 36 rows x ctx), generate took 2.8608 s for
    # 6 tokens; the bound at 1e4 FLOP/s and 1e4 B/s is 1.4304 s (the hand case above): distance 2.0,
    # 3 / 2.8608 decode steps/s measured, 3 / 1.4304 bound steps/s, 6 / 1.4304 bound tokens/s
    rec = [{"steps": 3.0, "rows": 6.0, "rows_ctx": 36.0}] * 2
    d = decode_summary(rec, 2.8608, 6.0, DIMS, torch.bfloat16, 1e4, 1e4)
    assert d["distance"] == pytest.approx(2.0) and d["limit"] == "compute"
    assert d["steps_per_s"] == pytest.approx(3 / 2.8608) and d["tokens_per_s"] == pytest.approx(6 / 2.8608)
    assert d["bound_steps_per_s"] == pytest.approx(3 / 1.4304) and d["bound_tokens_per_s"] == pytest.approx(6 / 1.4304)
    assert d["rows_per_step"] == 2.0 and d["ctx_mean"] == 6.0 and d["dtype"] == "bfloat16"
    # no decode step seen (a generator outside the policy module): NaN, not a division by zero
    d = decode_summary([{}], 1.0, 6.0, DIMS, torch.float32, 1e4, 1e4)
    assert d["steps_per_s"] != d["steps_per_s"] and d["distance"] != d["distance"] and d["limit"] is None


def test_model_dims_of_the_tiny_llama():
    from zoo.models.tiny import tiny_model_and_tokenizer

    m, _ = tiny_model_and_tokenizer(seed=0)  # hidden 64, 4 heads, 2 KV heads -> head_dim 16, 2 layers
    d = model_dims(m)
    n = sum(p.numel() for p in m.parameters())
    assert d == {"params": n, "weight_bytes": 4.0 * n, "layers": 2.0, "q_dim": 64.0, "kv_dim": 32.0}
    assert model_dims(m, torch.bfloat16)["weight_bytes"] == 2.0 * n  # bf16 autocast reads bf16 copies
    assert model_dims(m, torch.float64)["weight_bytes"] == 4.0 * n  # never more than the weights' own


def test_the_rate_probes_are_positive_and_finite():
    for x in (matmul_rate(torch.float32, n=64, seconds=0.01), copy_bandwidth(mb=1, seconds=0.01)):
        assert 0 < x < float("inf")


def test_parse_backends():
    from zoo.cli.bench_options import parse_backends

    assert parse_backends([]) == ["hf"]
    assert parse_backends(["hf,noisy"]) == ["hf", "noisy"]
    assert parse_backends(["hf", "{name: noisy, sigma: 0.2}"]) == ["hf", {"name": "noisy", "sigma": 0.2}]
    with pytest.raises(ValueError, match=r"--backend: generator 'sglang' is not registered; known: hf, noisy, vllm"):
        parse_backends(["hf,sglang"])
    with pytest.raises(ValueError, match="empty name"):
        parse_backends(["hf,"])
    with pytest.raises(ValueError, match="sigma"):
        parse_backends(["{name: noisy, sigma: -1}"])


def test_cli_backends_side_by_side_print_the_decode_columns(tiny_model_dir, tmp_path):
    from zoo.cli import app

    args = [
        "bench",
        "grpo",
        "--model",
        str(tiny_model_dir),
        "--task",
        json.dumps(TINY_TASK),
        "--prompts",
        "2",
        "--group-size",
        "2",
        "--max-new-tokens",
        "4",
        "--steps",
        "1",
        "--threads",
        "2",
        "--ignore-eos",
    ]
    out = tmp_path / "b.json"
    r = CliRunner().invoke(
        app, args + ["--backend", "hf", "--backend", "noisy", "--out", str(out)], env={"COLUMNS": "250"}
    )
    assert r.exit_code == 0, r.output
    for col in (
        "start-up s",
        "sync s",
        "gen tok/s",
        "decode steps/s",
        "ms/step",
        "bound steps/s",
        "bound tok/s",
        "distance",
        "noisy",
        "backend noisy",
    ):
        assert col in r.output, col
    res = json.loads(out.read_text())["backends"]
    assert [x["spec"]["backend"] for x in res] == ["hf", "noisy"]
    for x in res:
        # 2 prompts x 2 = 4 rows in one generate call (the sampling micro-batch is >= 32), EOS ignored: 4 new
        # tokens = 4 one-token forwards of 4 rows (the shared prefill runs the first P-1 prompt tokens, the
        # first decode step feeds the last prompt token), attending to P .. P+3 positions: mean P + 1.5
        d = x["decode"]
        assert d["decode_steps"] == 4 and d["rows_per_step"] == 4 and x["phases"]["generate"]["tokens"] == 16
        assert d["ctx_mean"] % 1 == 0.5 and d["ctx_mean"] > 1.5
        assert d["distance"] >= 1.0 and d["limit"] in ("compute", "memory")  # the bound is a lower bound on time
        # hf and noisy start no engine; grpo takes an optimizer step, so the sync ran and was timed (default 0.0)
        assert x["generator"] == {"name": x["spec"]["backend"], "startup_s": 0.0}
        assert x["step"]["sync_s"] > 0.0 and x["steps"][0]["step"]["sync_s"] == x["step"]["sync_s"]
    r = CliRunner().invoke(app, args + ["--backend", "hf,noisy", "--memory"])
    assert r.exit_code != 0 and "side by side" in r.output


def test_generator_info_names_the_backend_and_its_start_up():
    from types import SimpleNamespace

    from zoo.bench.run import generator_info

    assert generator_info(SimpleNamespace(), "hf") == {"name": "hf", "startup_s": 0.0}  # no engine: 0
    assert generator_info(SimpleNamespace(startup_s=12.5), {"name": "vllm", "enforce_eager": True}) == {
        "name": "vllm",
        "startup_s": 12.5,
    }


def test_attended_positions_of_a_decode_forward():
    from types import SimpleNamespace

    from zoo.bench.probe import attended

    # a cache holding 5 positions: the new token attends to 5 + 1; without a cache the 2-D mask's width,
    # then the cache position + 1 (position 9 -> 10 positions), else nothing known
    assert (
        attended({"past_key_values": SimpleNamespace(get_seq_length=lambda: 5), "attention_mask": torch.ones(2, 3)})
        == 6
    )
    assert attended({"cache": SimpleNamespace(get_seq_length=lambda: 8)}) == 9  # transformers 5.x's name
    assert attended({"attention_mask": torch.ones(2, 7)}) == 7
    assert attended({"attention_mask": torch.ones(2, 1, 1, 7), "cache_position": torch.tensor([9])}) == 10
    assert attended({}) == 0
