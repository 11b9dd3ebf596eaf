"""Multi-turn rollouts under ddp and fsdp on two gloo ranks (tests/distributed/envs_dist_worker.py): the ranks make
different numbers of `continue_` calls per step and neither deadlocks; the logged env metrics are the
mean over both ranks' trajectories; with the scripted generator a step under either strategy ends with
one process's weights."""

import json

import pytest
from conftest import TESTS, run_two_ranks

pytestmark = pytest.mark.dist  # every test reads a run of two gloo ranks started by torchrun


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("envs_dist")
    run_two_ranks(TESTS / "distributed" / "envs_dist_worker.py", str(out), str(tiny_model_dir), timeout=600)
    return out


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_ranks_with_different_turn_counts_finish(ranks, strategy):
    from zoo.run.tracking import read_jsonl

    reps = [json.loads((ranks / f"rank{r}.json").read_text())[strategy] for r in range(2)]
    for r in reps:
        assert r["status"] == "finished" and r["steps"] == 2
    # one prompt x G 2 per rank and step: rank 0 one turn per step, rank 1 three
    assert reps[0]["calls"] == [2, 2] and reps[1]["calls"] == [2] * 6
    recs = [x for x in read_jsonl(ranks / f"run_{strategy}" / "metrics.jsonl") if "env/turns" in x]
    assert [x["env/turns"] for x in recs] == [2.0, 2.0]  # (1 + 3) / 2 over the ranks
    assert [x["env/max_turns_frac"] for x in recs] == [0.5, 0.5]


@pytest.fixture(scope="module")
def single(tmp_path_factory, tiny_model_dir):
    """(trainable params, continue_ calls, max grad norm) of `equal_config` in this process (strategy
    single: both prompts)."""
    import envs_dist_worker as w

    from zoo.core import registry

    out = tmp_path_factory.mktemp("envs_one")
    try:  # the ranks run every row in full (no prompt sharing under collectives), so this process does too:
        # the shared-prefix forward's float rounding, amplified by AdamW's first step where |g| is near eps,
        # would otherwise exceed the tolerance below (zoo.models.forward.SHARED_PREFIX_MIN)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("zoo.models.forward.SHARED_PREFIX_MIN", 10**9)
            params, calls = w.trained_params(w.equal_config(tiny_model_dir, out, "single"))
    finally:  # the worker module registered its env and generator in this process too
        for kind, name in (("env", "rank_turns"), ("env", "question_turns"), ("generator", "scripted")):
            registry._REGISTRY[kind].pop(name, None)
    grad_norm = [json.loads(x).get("optim/grad_norm") for x in (out / "metrics.jsonl").open()]
    return params, calls, max(g for g in grad_norm if g is not None)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_step_with_an_env_equals_one_process(ranks, single, strategy):
    """One GRPO step over 2 prompts with turns depending on the question: 2 ranks (1 prompt each,
    different numbers of continue_ calls) end with the weights of one process over both prompts."""
    import torch

    one, one_calls, grad_norm = single
    calls = [json.loads((ranks / f"rank{r}.json").read_text())[f"equal_calls_{strategy}"] for r in range(2)]
    assert sorted(map(len, calls)) == [1, 3], calls  # one rank's prompt takes 1 turn, the other's 3
    assert one_calls == [4, 2, 2]  # both prompts x G 2, then the 3-turn prompt's 2 trajectories
    assert grad_norm > 1e-3  # a real update, not numerical noise
    a = torch.load(ranks / f"equal_{strategy}_rank0.pt")
    assert a.keys() == one.keys() and len(a) > 0
    if strategy == "ddp":  # fsdp's rank 0 saved the whole weights gathered from both ranks' shards
        b = torch.load(ranks / "equal_ddp_rank1.pt")
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=f"ranks differ: {k}")
    for k in a:
        # AdamW's first step moves each weight by ~lr = 1e-3 (g / |g|); where |g| is near Adam's eps the
        # sum order (ddp's all-reduce, fsdp's reduce-scatter of two ranks' gradients vs one process's sum)
        # shows: measured <= 5.1e-6 on 4 weights of 87488 above 1e-6, the same under ddp and fsdp (whose
        # weights came out bit-equal), so the tolerance is 1% of a step: a wrong row or a trained env
        # token would move many weights by ~1e-3
        torch.testing.assert_close(a[k], one[k], atol=1e-5, rtol=1e-5, msg=f"2 ranks vs 1: {k}")
