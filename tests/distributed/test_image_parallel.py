"""Images in prompts under `training.strategy` ddp and fsdp on two real gloo processes
(tests/distributed/image_parallel_worker.py): one update over rows with images split unevenly between
the ranks equals one process updating on all of them (loss, gradient norm, every parameter of the
tiny Qwen2-VL, its vision tower included)."""

import json

import pytest
import torch
from conftest import TESTS as HERE
from conftest import run_two_ranks
from image_parallel_worker import run

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # two torchrun launches of a VLM: a minute of CPU


@pytest.fixture(scope="module")
def single():
    return run(None, None)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_an_update_on_images_equals_one_process(strategy, single, tmp_path):
    run_two_ranks(HERE / "distributed" / "image_parallel_worker.py", strategy, str(tmp_path), timeout=600)
    m1, p1 = single
    assert m1["optim/updates"] == 1.0
    for r in range(2):
        rep = json.loads((tmp_path / f"report_rank{r}.json").read_text())
        for k in ("loss/policy", "optim/grad_norm"):
            assert rep[k] == pytest.approx(float(m1[k]), rel=1e-5, abs=1e-6), (strategy, r, k)
        got = torch.load(tmp_path / f"params_rank{r}.pt")
        assert got.keys() == p1.keys()
        for k in p1:
            torch.testing.assert_close(got[k], p1[k], atol=1e-5, rtol=1e-5, msg=f"{strategy} rank {r}: {k}")
    vision = [k for k in p1 if ".visual." in k]
    start = run.__globals__["build"]()[0]
    moved = {k: float((p1[k] - v.detach()).abs().max()) for k, v in start.named_parameters()}
    assert vision and max(moved[k] for k in vision) > 1e-6  # the images' tower was trained too
