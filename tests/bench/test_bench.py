"""`zoo bench` on the tiny model: every phase reported with finite numbers, the FLOP/s estimate is
6 x params x tokens / time, the memory breakdown adds up, --json parses, and the TRL path (only when
trl is installed). No timed assertions: the numbers are whatever this machine measures."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from zoo import bench as zb

TINY_TASK = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "size": 32,
    "eval_size": 4,
    "fewshot": 0,
    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
}


def _spec(model_dir, **kw) -> zb.BenchSpec:
    base = dict(
        model=str(model_dir),
        prompts=2,
        group_size=4,
        max_new_tokens=8,
        steps=1,
        micro_batch=4,
        task=dict(TINY_TASK),
        threads=2,
    )
    return zb.BenchSpec(**(base | kw))


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


@pytest.fixture(scope="module")
def grpo_result(tiny_model_dir):
    return zb.run_bench(_spec(tiny_model_dir, variant="grpo"))


@pytest.fixture(scope="module")
def ppo_result(tiny_model_dir):
    return zb.run_bench(_spec(tiny_model_dir, variant="ppo", updates="2x1"))


def test_bench_reports_every_phase_with_finite_numbers(grpo_result):
    r = grpo_result
    assert set(r["phases"]) == {"generate", "forward", "score", "advantage", "train"}  # GRPO: no critic
    for name, p in r["phases"].items():
        for k in ("seconds", "tokens", "tokens_per_s", "peak_mb"):
            assert _finite(p[k]) and p[k] >= 0, (name, k, p[k])
        assert p["peak_mb"] > 0, name
    assert r["phases"]["generate"]["tokens"] > 0 and r["phases"]["train"]["tokens"] > 0
    assert r["phases"]["forward"]["tokens"] > 0  # GRPO's KL in the loss needs reference log-probs
    assert _finite(r["step"]["seconds"]) and r["step"]["seconds"] > 0
    assert r["step"]["peak_mb"] == max(p["peak_mb"] for p in r["phases"].values())
    assert len(r["steps"]) == 1  # the warm-up step is not measured


def test_train_flops_is_six_params_tokens_over_time(grpo_result):
    fl = grpo_result["train_flops"]
    train = grpo_result["phases"]["train"]
    assert fl["tokens"] == train["tokens"] and fl["seconds"] == train["seconds"]
    assert fl["params"] == grpo_result["parameters"]["policy"]["total"] and fl["critic_tokens"] == 0
    assert fl["flops_per_s"] == pytest.approx(6 * fl["params"] * fl["tokens"] / fl["seconds"], rel=1e-12)
    # positions run: each group's prompt once (shared), then every completion; fewer than the rows' tokens
    assert grpo_result["phases"]["generate"]["tokens"] <= fl["tokens"] < train["real_tokens"]


def test_memory_breakdown_adds_up_to_the_peak(grpo_result, ppo_result):
    for r in (grpo_result, ppo_result):
        m = r["memory"]
        parts = ("runtime_mb", "weights_mb", "gradients_mb", "optimizer_mb", "activations_mb")
        assert sum(m[k] for k in parts) == pytest.approx(m["peak_mb"], rel=1e-9)
        for k in ("runtime_mb", "weights_mb", "gradients_mb", "optimizer_mb"):
            assert m[k] > 0, k
        assert m["optimizer_mb"] == pytest.approx(2 * m["gradients_mb"], rel=0.01)  # AdamW: two moments per param
    # PPO carries a critic (its weights, gradients and optimizer state) and GRPO a reference copy
    g, p = grpo_result["memory"], ppo_result["memory"]
    assert p["gradients_mb"] > g["gradients_mb"] and p["optimizer_mb"] > g["optimizer_mb"]
    assert grpo_result["parameters"]["reference_copy"] and ppo_result["parameters"]["reference_copy"]


def test_bench_reports_the_step_near_its_bound(grpo_result, ppo_result):
    """Every model phase has FLOPs, a bound and a distance (zoo/bench/phase_bound.py); the step's bound
    is the sum of its phases'; the critic's FLOPs count within train. No timing asserts beyond distance > 1
    (the tiny model's bound is microseconds)."""
    for res in (grpo_result, ppo_result):
        b = res["bound"]
        for p in ("generate", "forward", "train", "step"):
            assert _finite(b[p]["flops"]) and b[p]["flops"] > 0 and _finite(b[p]["bound_s"]), p
            assert b[p]["distance"] == pytest.approx(b[p]["seconds"] / b[p]["bound_s"])
        parts = ("generate", "forward", "train")
        assert b["step"]["bound_s"] == pytest.approx(sum(b[p]["bound_s"] for p in parts))
        assert b["step"]["distance"] > 1
    assert "critic" not in grpo_result["bound"]
    crit = ppo_result["bound"]["critic"]
    assert 0 < crit["flops"] < ppo_result["bound"]["train"]["flops"]


def test_critic_is_reported_within_train(ppo_result):
    ph = ppo_result["phases"]
    assert "critic" in ph
    assert 0 < ph["critic"]["seconds"] <= ph["train"]["seconds"]
    assert ph["critic"]["real_tokens"] == ph["train"]["real_tokens"]  # the critic runs over the same rows
    fl = ppo_result["train_flops"]
    par = ppo_result["parameters"]
    assert fl["params"] == par["policy"]["total"] and fl["critic_params"] == par["critic"]["total"]
    assert fl["tokens"] == ph["train"]["tokens"] and fl["critic_tokens"] == ph["critic"]["tokens"] > 0
    want = 6 * (fl["params"] * fl["tokens"] + fl["critic_params"] * fl["critic_tokens"]) / fl["seconds"]
    assert fl["flops_per_s"] == pytest.approx(want, rel=1e-12)


def test_cli_json_output_parses(tiny_model_dir):
    import zoo.cli.bench  # noqa: F401  (registers the command, as main() does)
    from zoo.cli import app

    res = CliRunner().invoke(
        app,
        [
            "bench",
            "dapo",
            "--model",
            str(tiny_model_dir),
            "--task",
            json.dumps(TINY_TASK),
            "--prompts",
            "2",
            "--group-size",
            "2",
            "--max-new-tokens",
            "6",
            "--steps",
            "1",
            "--micro-batch",
            "4",
            "--updates",
            "1x2",
            "--lora",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["spec"]["variant"] == "dapo" and out["spec"]["lora"] is True
    assert _finite(out["step"]["seconds"]) and _finite(out["train_flops"]["flops_per_s"])
    assert out["memory"]["gradients_mb"] < out["memory"]["weights_mb"]  # LoRA: only adapters train


def test_cli_rejects_bad_options(tiny_model_dir):
    import zoo.cli.bench  # noqa: F401
    from zoo.cli import app

    r = CliRunner().invoke(app, ["bench", "grpo", "--vs", "verl"])
    assert r.exit_code == 1 and "only 'trl'" in r.output
    r = CliRunner().invoke(app, ["bench", "grpo", "--scan", "temperature=1,2"])
    assert r.exit_code == 1 and "unknown key" in r.output
    r = CliRunner().invoke(app, ["bench", "grpo", "ppo"])
    assert r.exit_code == 1 and "--memory" in r.output


def test_parse_helpers():
    assert zb.parse_updates("2x3") == {"epochs": 2, "minibatches": 3}
    assert zb.parse_scan("group_size=2,4,8") == ("group_size", [2, 4, 8])
    assert zb.parse_scan("max-new-tokens=32,64") == ("max_new_tokens", [32, 64])
    with pytest.raises(ValueError):
        zb.parse_updates("2 epochs")
    with pytest.raises(ValueError):
        zb.parse_scan("group_size=0,2")


def test_scan_in_process_and_plot(tiny_model_dir, tmp_path):
    res = zb.scan(_spec(tiny_model_dir, variant="grpo"), "group_size", [2, 4], in_process=True)
    assert [p["value"] for p in res["points"]] == [2, 4]
    assert all(_finite(p["step_s"]) and p["peak_mb"] > 0 for p in res["points"])
    png = zb.plot_scan(res, tmp_path / "scan.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_matched_trl_settings():
    from zoo.bench.trl import trl_spec
    from zoo.config.variant import load_variant

    spec = zb.BenchSpec(prompts=8, group_size=4, max_new_tokens=64, micro_batch=8)
    g = trl_spec(spec)["grpo"]
    assert (g["loss_type"], g["scale_rewards"], g["epsilon"], g["beta"], g["num_iterations"]) == (
        "dapo",
        "group",
        0.2,
        0.0,
        1,
    )
    assert g["per_device_train_batch_size"] * g["gradient_accumulation_steps"] == 32 and g["num_generations"] == 4
    assert g["max_completion_length"] == 64 and g["top_k"] == 0 and g["gradient_checkpointing"] is False
    r = load_variant(zb.TRL_MATCHED_VARIANT).resolved()
    assert r["clip"] == {"name": "ppo", "eps": 0.2} and r["aggregate"] == {"name": "token_mean"}
    assert r["normalizer"] == {"name": "group_std", "eps": 1e-6} and r["advantage"] == {"name": "group_mean"}
    assert r["kl"]["placement"] == "none" and r["filter"] == [] and r["length"] == [] and r["critic"] is None


def test_vs_trl_on_the_tiny_model(tiny_model_dir):
    """TRL's GRPOTrainer on the same tiny model and task, in this process (skipped without trl)."""
    pytest.importorskip("trl")
    from zoo.bench.trl import run_trl, trl_spec

    res = run_trl(trl_spec(_spec(tiny_model_dir, steps=1)))
    assert len(res["step_times"]) == 1 and _finite(res["step_times"][0]) and res["peak_mb"] > 0
    assert res["logs"] and "reward" in res["logs"][0]


# ---------------------------------------------------------------- the speed-ups keep the numbers


def _group_rollout(share: bool, **kw):
    import torch

    from zoo.backends.generate.hf import generate_rollout
    from zoo.models.tiny import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer(seed=0)
    prompts = [[{"role": "user", "content": "Calculate 2+3."}], [{"role": "user", "content": "What is 10 - 7, then?"}]]
    torch.manual_seed(0)
    return model, generate_rollout(model, tok, prompts, group_size=3, max_new_tokens=9, share_prompts=share, **kw)


@pytest.mark.parametrize("micro_batch", [None, 4])
def test_shared_prefill_generates_the_same_completions(micro_batch):
    _, a = _group_rollout(False, micro_batch=micro_batch)
    _, b = _group_rollout(True, micro_batch=micro_batch)
    assert a.completion_ids.equal(b.completion_ids) and a.texts == b.texts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompt_logprobs_and_gradients_match_the_plain_forward(temperature):
    import torch

    from zoo.step.logprobs import token_logprobs

    model, ro = _group_rollout(False)
    ids = ro.input_ids()
    att = torch.cat([ro.prompt_mask, torch.ones_like(ro.completion_ids)], dim=1)
    T = ro.completion_ids.shape[1]
    out = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        lp, ent = token_logprobs(model, ids, att, T, temperature=temperature, with_entropy=True, share_prompts=share)
        (lp * ro.loss_mask).sum().backward()
        out[share] = (lp.detach(), ent, [p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-5, rtol=1e-5)
    for g_shared, g_plain in zip(out[True][2], out[False][2]):
        torch.testing.assert_close(g_shared, g_plain, atol=1e-5, rtol=1e-4)
