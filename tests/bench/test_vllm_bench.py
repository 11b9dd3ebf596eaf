"""`zoo bench --backend hf,vllm` on the tiny vLLM-shaped model (marker `vllm`; skipped where vLLM does
not import): both backends run in one bench, vLLM's engine start-up and its timed sync are recorded,
and its decode distance is '-' (vLLM runs its own model copy, whose decode steps the bench does not
count). No timing asserts."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

pytest.importorskip("vllm", reason="vLLM is not installed (docs/guides/vllm.md, 'vLLM on CPU')")

pytestmark = pytest.mark.vllm

TINY_TASK = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "size": 32,
    "eval_size": 4,
    "fewshot": 0,
    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
}


def test_bench_hf_and_vllm_side_by_side(tmp_path):
    from zoo.cli import app
    from zoo.models.tiny import tiny_vllm_model_and_tokenizer

    model, tok = tiny_vllm_model_and_tokenizer(seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    out = tmp_path / "b.json"
    args = [
        "bench",
        "grpo",
        "--model",
        str(tmp_path / "m"),
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
        "1",
        "--ignore-eos",
        "--autocast",
        "none",
        "--backend",
        "hf",
        "--backend",
        "{name: vllm, max_model_len: 256}",
        "--out",
        str(out),
    ]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    hf, vl = json.loads(out.read_text())["backends"]
    assert hf["generator"]["name"] == "hf" and vl["generator"]["name"] == "vllm"
    assert hf["generator"]["startup_s"] == 0.0 and vl["generator"]["startup_s"] > 0.0  # the engine started
    for x in (hf, vl):  # EOS ignored: 2 x 2 rows x 4 tokens each way; a sync after the optimizer step
        assert x["phases"]["generate"]["tokens"] == 16 and x["step"]["sync_s"] > 0.0
    assert hf["decode"]["distance"] >= 1.0
    assert math.isnan(vl["decode"]["distance"])  # no policy-module decode steps: no bound
    assert vl["decode"]["decode_steps"] == 0 and vl["decode"]["tokens_per_s"] > 0
