"""Multi-turn rollouts under ddp and fsdp on two gloo ranks (tests/distributed/envs_dist_worker.py): the ranks make
different numbers of `continue_` calls per step and neither deadlocks; the logged env metrics are the
mean over both ranks' trajectories."""
import json

import pytest

from conftest import TESTS, run_two_ranks


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


def test_a_ddp_step_with_an_env_equals_one_process(ranks, tiny_model_dir, tmp_path):
    """One GRPO step over 2 prompts with turns depending on the question: 2 ddp ranks (1 prompt each,
    different numbers of continue_ calls) end with the weights of one process over both prompts."""
    import torch

    import envs_dist_worker as w
    from zoo.core import registry

    calls = [json.loads((ranks / f"rank{r}.json").read_text())["equal_calls"] for r in range(2)]
    assert sorted(map(len, calls)) == [1, 3], calls  # one rank's prompt takes 1 turn, the other's 3
    try:
        single, one_calls = w.trained_params(w.equal_config(tiny_model_dir, tmp_path / "one", "single"))
    finally:  # the worker module registered its env and generator in this process too
        for kind, name in (("env", "rank_turns"), ("env", "question_turns"), ("generator", "scripted")):
            registry._REGISTRY[kind].pop(name, None)
    assert one_calls == [4, 2, 2]  # both prompts x G 2, then the 3-turn prompt's 2 trajectories
    grad_norm = [json.loads(x).get("optim/grad_norm") for x in (tmp_path / "one" / "metrics.jsonl").open()]
    assert max(g for g in grad_norm if g is not None) > 1e-3  # a real update, not numerical noise
    a, b = (torch.load(ranks / f"equal_rank{r}.pt") for r in range(2))
    assert a.keys() == single.keys() and len(a) > 0
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=f"ranks differ: {k}")
        # AdamW's first step moves each weight by ~lr = 1e-3 (g / |g|); where |g| is near Adam's eps the
        # sum order of the all-reduce shows (measured: <= 5e-6 on 1 weight of 8192), so the tolerance is
        # 1% of a step: a wrong row or a trained env token would move many weights by ~1e-3
        torch.testing.assert_close(a[k], single[k], atol=1e-5, rtol=1e-5, msg=f"2 ranks vs 1: {k}")
