"""`training.strategy` ddp and fsdp on two real gloo processes (tests/distributed/parallel_worker.py, one torchrun
launch per strategy): one update of 2 minibatches over rows split unevenly between the ranks (rank 0
has fewer micro-batches in the first optimizer step and none in the second: it pads with zero-loss
micro-batches, or the collectives would hang) equals one process updating on the same rows: loss,
gradient norm (clipped to 0.05) and parameters, full fine-tuning and LoRA, token_mean and
seq_mean_token_mean. Then 2 steps of `zoo.run.trainer.train` under the strategy (the LoRA run also scores
with a tiny reward model on each rank: the reduced `reward/reward_model` agrees across ranks)."""

import json
import math
from pathlib import Path

import pytest
import torch
from conftest import TESTS as HERE
from conftest import gloo_unavailable, launch_two_ranks
from parallel_worker import CASES, case_name, injected_correct, run_case, run_dynamic_sampling

pytestmark = pytest.mark.dist  # every test reads a run of two gloo ranks started by torchrun


def _run(strategy: str, tmp_path_factory, model_dir) -> Path:
    why = gloo_unavailable()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp(strategy)
    proc = launch_two_ranks(
        HERE / "distributed" / "parallel_worker.py", strategy, str(out), str(model_dir), timeout=600
    )
    if proc.returncode != 0:
        pytest.fail(f"torchrun ({strategy}) failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    return out


@pytest.fixture(scope="module")
def ddp_ranks(tmp_path_factory, tiny_model_dir):
    return _run("ddp", tmp_path_factory, tiny_model_dir)


@pytest.fixture(scope="module")
def fsdp_ranks(tmp_path_factory, tiny_model_dir):
    return _run("fsdp", tmp_path_factory, tiny_model_dir)


@pytest.fixture(scope="module")
def single_results():
    return {case_name(*c): run_case(*c, None, None) for c in CASES}


def _check_update(out: Path, single_results) -> None:
    reports = [json.loads((out / f"report_rank{r}.json").read_text()) for r in range(2)]
    for c in CASES:
        name = case_name(*c)
        m1, p1 = single_results[name]
        start = run_case.__globals__["build"](*c)[0]
        moved = max(float((p1[k] - v.detach()).abs().max()) for k, v in start.named_parameters() if k in p1)
        assert moved > 1e-4, f"{name}: the single-process update did not move the weights"
        assert m1["optim/grad_norm"] > 0.05  # so clipping to 0.05 acts in both optimizer steps' mean
        for r, rep in enumerate(reports):
            assert rep[name]["optim/updates"] == 2.0
            for k in ("loss/policy", "optim/grad_norm"):
                assert rep[name][k] == pytest.approx(m1[k], rel=1e-5, abs=1e-6), (name, r, k)
            got = torch.load(out / f"params_{name}_rank{r}.pt")
            assert got.keys() == p1.keys()
            for k in p1:
                torch.testing.assert_close(got[k], p1[k], atol=1e-5, rtol=1e-5, msg=f"{name} rank {r}: {k}")


def _check_train(out: Path) -> None:
    reports = [json.loads((out / f"report_rank{r}.json").read_text()) for r in range(2)]
    for label in ("full", "lora"):
        for rep in reports:
            t = rep["train"][label]
            assert t["status"] == "finished" and t["steps"] == 2, t
        assert reports[0]["train"][label] == reports[1]["train"][label]  # reduced metrics agree
        a, b = (torch.load(out / f"train_{label}_rank{r}.pt") for r in range(2))
        assert a.keys() == b.keys() and a
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=f"{label}: ranks diverged at {k}")
    rm = reports[0]["train"]["lora"]["reward_model"]  # the reward model scored on both ranks, reduced alike
    assert isinstance(rm, float) and math.isfinite(rm) and rm != 0.0
    assert reports[0]["train"]["full"]["reward_model"] is None  # and only where the run names it


def test_ddp_update_equals_one_process(ddp_ranks, single_results):
    _check_update(ddp_ranks, single_results)


def test_fsdp_update_equals_one_process(fsdp_ranks, single_results):
    _check_update(fsdp_ranks, single_results)


def test_ddp_training_run(ddp_ranks):
    _check_train(ddp_ranks)


def test_fsdp_training_run(fsdp_ranks):
    _check_train(fsdp_ranks)


@pytest.fixture(scope="module")
def single_dynamic(tmp_path_factory, tiny_model_dir):
    return run_dynamic_sampling(tmp_path_factory.mktemp("dyn1"), tiny_model_dir, "single")


def _check_dynamic(out: Path, single: list) -> None:
    """The groups each step drew and kept over both ranks are the one-process run's (the same prompts
    in the same rounds: each round takes what the ranks still need together from the shared stream)."""
    reports = [json.loads((out / f"report_rank{r}.json").read_text()) for r in range(2)]
    both = sorted(map(tuple, reports[0]["dynamic_sampling"] + reports[1]["dynamic_sampling"]))
    one = sorted(map(tuple, single))
    assert both == one
    assert all(kept == injected_correct(q) for _, q, kept in one)
    assert any(not kept for *_, kept in one) and any(kept for *_, kept in one)  # both decisions happen
    assert len(one) > 2 * 4  # some groups were refilled: more than 4 prompts per step were drawn


def test_ddp_dynamic_sampling_decisions(ddp_ranks, single_dynamic):
    _check_dynamic(ddp_ranks, single_dynamic)


def test_fsdp_dynamic_sampling_decisions(fsdp_ranks, single_dynamic):
    _check_dynamic(fsdp_ranks, single_dynamic)
