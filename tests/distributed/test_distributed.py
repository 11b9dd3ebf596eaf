"""Two real gloo processes (torchrun) doing one data-parallel optimizer step: the result equals one
process doing the step on all rows (C2/C3 across ranks: gradients summed, normalisers over the
step's totals on every rank), with rows of different lengths split unevenly between the ranks."""

import json
import math
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import gloo_unavailable, launch_two_ranks
from dist_worker import AGGREGATES, DIAG_ARGS, SHARES, build_case, correction_case, normalizer_case, run_update

pytestmark = pytest.mark.dist  # every test reads a run of two gloo ranks started by torchrun

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, tiny_model_dir):
    why = gloo_unavailable()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("dist")
    try:
        proc = launch_two_ranks(HERE / "dist_worker.py", str(out), str(tiny_model_dir))
    except subprocess.TimeoutExpired:
        pytest.skip("two gloo processes did not finish in time on this machine")
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if (
            any(s in text for s in ("Address family not supported", "Connection refused", "gloo", "rendezvous"))
            and not (out / "report_rank0.json").exists()
        ):
            pytest.skip(f"gloo could not start here:\n{text[-2000:]}")
        pytest.fail(f"torchrun failed ({proc.returncode}):\n{text[-4000:]}")
    return out


def _reports(out: Path) -> list[dict]:
    return [json.loads((out / f"report_rank{r}.json").read_text()) for r in range(2)]


def test_two_processes_really_ran(two_ranks):
    reps = _reports(two_ranks)
    assert [r["rank"] for r in reps] == [0, 1]
    assert all(r["world_size"] == 2 and r["is_distributed"] for r in reps)


def test_all_reduce_helpers(two_ranks):
    for r in _reports(two_ranks):
        assert r["all_reduce_sum"] == [3.0, 20.0]  # (1 + 2), (10 + 10)
        assert r["input_unchanged"]
        assert r["mean_dict"] == {"a": 0.5, "b": 4.0}


@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_step_counts_are_totals_over_ranks(two_ranks, aggregate):
    _, _, batch, _, _ = build_case(aggregate)
    for r in _reports(two_ranks):
        tokens, sequences, local = r[f"counts/{aggregate}"]
        assert (tokens, sequences) == (float(batch.loss_mask.sum()), float(batch.size))
        assert local == float(batch.select(SHARES[r["rank"]]).loss_mask.sum())
    assert _reports(two_ranks)[0][f"counts/{aggregate}"][2] != _reports(two_ranks)[1][f"counts/{aggregate}"][2]


@pytest.mark.parametrize("aggregate", AGGREGATES)
def test_data_parallel_step_equals_one_process(two_ranks, aggregate):
    model, tok, batch, slots, s = build_case(aggregate)
    start = {k: v.detach().clone() for k, v in model.named_parameters()}
    single_metrics = run_update(model, tok, batch, slots, s)
    single = {k: v.detach() for k, v in model.named_parameters()}
    assert max(float((single[k] - start[k]).abs().max()) for k in start) > 1e-4  # the step did move

    ranks = [torch.load(two_ranks / f"params_{aggregate}_rank{r}.pt") for r in range(2)]
    for k in single:
        torch.testing.assert_close(ranks[0][k], ranks[1][k], atol=0, rtol=0, msg=f"ranks differ: {k}")
        torch.testing.assert_close(ranks[0][k], single[k], atol=1e-6, rtol=1e-5, msg=f"2 ranks vs 1: {k}")

    # logged values are the step's, over all ranks' tokens, on every rank (not one rank's share)
    for r in _reports(two_ranks):
        m = r[f"metrics/{aggregate}"]
        for k in (
            "loss/policy",
            "optim/grad_norm",
            "entropy",
            "ratio/mean",
            "ratio/max",
            "clip/low_frac",
            "clip/high_frac",
        ):
            assert m[k] == pytest.approx(single_metrics[k], rel=1e-5, abs=1e-6), k


def test_rollout_metrics_are_over_every_rank(two_ranks):
    """rollout/* with a correction: token means and the max over both ranks' tokens (rank 0 holds 1 of
    the 17 tokens, so a mean of the ranks' means would differ), equal to one process's."""
    model, tok, batch, slots, s = correction_case()
    single = run_update(model, tok, batch, slots, s)
    assert 0 < single["rollout/masked_frac"] < 1 and single["rollout/mismatch_kl"] > 0
    model0, tok0, batch0, slots0, s0 = correction_case()
    alone = run_update(model0, tok0, batch0.select(SHARES[0]), slots0, s0)  # rank 0's share on its own
    assert abs(alone["rollout/mismatch_kl"] - single["rollout/mismatch_kl"]) > 1e-3
    for r in _reports(two_ranks):
        m = r["metrics/correction"]
        for k in (
            "rollout/mismatch_kl",
            "rollout/weight_mean",
            "rollout/weight_max",
            "rollout/masked_frac",
            "loss/policy",
        ):
            assert m[k] == pytest.approx(single[k], rel=1e-5, abs=1e-7), k


def test_batch_normalizer_uses_the_global_batch(two_ranks):
    """batch_std under data parallelism whitens with the mean/std of both ranks' tokens: each rank's
    rows equal the single-process result on the whole batch, not a per-rank whitening."""
    adv, mask, gids, norm = normalizer_case()
    whole = norm(adv, mask, gids)  # [5, 6] one process, all rows
    for r in _reports(two_ranks):
        rows = SHARES[r["rank"]]
        got = torch.tensor(r["batch_std"])
        T = got.shape[1]
        torch.testing.assert_close(got, whole[rows, :T], atol=1e-6, rtol=1e-5)
        local = norm(adv[rows, :T], mask[rows, :T], gids[rows])
        if len(rows) > 1:  # a rank's own whitening differs (what the engine did before)
            assert not torch.allclose(local, got, atol=1e-3)


def test_step_diagnostics_gather_the_rows_of_every_rank(two_ranks):
    """Each rank holds one group; both log the diagnostics of the whole step (test_diagnostics' hand-worked
    values), not of their own group (one group alone gives other correlations)."""
    from test_diagnostics import two_group_batch

    from zoo.step.diagnostics import step_diagnostics

    whole = step_diagnostics(two_group_batch(), *DIAG_ARGS)
    alone = step_diagnostics(two_group_batch().select([0, 1]), *DIAG_ARGS)
    assert alone["completion/len_correct"] != whole["completion/len_correct"]
    for r in _reports(two_ranks):
        got = r["diagnostics"]
        assert set(got) == set(whole)
        for k, v in whole.items():
            assert (math.isnan(v) and math.isnan(got[k])) or got[k] == pytest.approx(v), k


# ---------------------------------------------------------------- zoo.run.trainer.train on two ranks
def test_training_run_on_two_ranks(two_ranks):
    """2 GRPO steps with LoRA, 1 prompt per rank per step: disjoint prompts, one set of metrics,
        the same weights on both ranks afterwards (training.strategy ddp: adapters initialised from the same
    seed on every rank, gradients summed through DDP with the loss scaled by the world size)."""
    from zoo.run.tracking import read_jsonl

    reps = [r["train"] for r in _reports(two_ranks)]
    for r in reps:
        assert r["summary"]["status"] == "finished" and r["summary"]["steps"] == 2
        assert len(r["prompts"]) == 2  # prompts_per_step 2 over 2 ranks, 2 steps
    assert not set(reps[0]["prompts"]) & set(reps[1]["prompts"]), "the ranks trained on the same prompts"

    recs = [x for x in read_jsonl(two_ranks / "run" / "metrics.jsonl") if "reward/total" in x]
    assert [x["step"] for x in recs] == [1, 2], "one metrics record per step, written by rank 0 only"
    assert [x["count/completions"] for x in recs] == [8.0, 16.0]  # 2 ranks x 1 prompt x G 4 per step
    state = torch.load(two_ranks / "run" / "checkpoint" / "state.pt", weights_only=False)
    assert len(state["rng_ranks"]) == 2

    a, b = (torch.load(two_ranks / f"train_params_rank{r}.pt") for r in range(2))
    assert a.keys() == b.keys() and len(a) > 0
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0, msg=f"ranks diverged: {k}")


def test_adaptive_kl_beta_agrees_across_ranks(two_ranks):
    """The adaptive controller runs on the step's KL over both ranks' rows: every rank ends with the
    same beta, and it moved from its start (0.1) as the logged records say."""
    from zoo.run.tracking import read_jsonl

    reps = [r["train_kl"] for r in _reports(two_ranks)]
    assert all(r["status"] == "finished" for r in reps)
    assert reps[0]["beta"] == reps[1]["beta"]
    recs = [x for x in read_jsonl(two_ranks / "run_kl" / "metrics.jsonl") if "kl/beta" in x]
    assert len(recs) == 2 and recs[-1]["kl/beta"] == pytest.approx(reps[0]["beta"])
    assert reps[0]["beta"] != 0.1
