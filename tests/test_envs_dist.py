"""Multi-turn rollouts under ddp and fsdp on two gloo ranks (tests/envs_dist_worker.py): the ranks make
different numbers of `continue_` calls per step and neither deadlocks; the logged env metrics are the
mean over both ranks' trajectories."""
import json

import pytest

from conftest import TESTS, run_two_ranks


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("envs_dist")
    run_two_ranks(TESTS / "envs_dist_worker.py", str(out), str(tiny_model_dir), timeout=600)
    return out


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_ranks_with_different_turn_counts_finish(ranks, strategy):
    from zoo.study.tracking import read_jsonl

    reps = [json.loads((ranks / f"rank{r}.json").read_text())[strategy] for r in range(2)]
    for r in reps:
        assert r["status"] == "finished" and r["steps"] == 2
    # one prompt x G 2 per rank and step: rank 0 one turn per step, rank 1 three
    assert reps[0]["calls"] == [2, 2] and reps[1]["calls"] == [2] * 6
    recs = [x for x in read_jsonl(ranks / f"run_{strategy}" / "metrics.jsonl") if "env/turns" in x]
    assert [x["env/turns"] for x in recs] == [2.0, 2.0]  # (1 + 3) / 2 over the ranks
    assert [x["env/max_turns_frac"] for x in recs] == [0.5, 0.5]
