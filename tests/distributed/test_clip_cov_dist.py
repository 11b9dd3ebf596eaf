"""clip_cov / kl_cov select over the whole optimizer step on every rank: two gloo ranks holding 1 and
4 of the 5 rows make the same update, and select the same share of tokens, as one process on all rows."""

import json
from pathlib import Path

import pytest
import torch
from conftest import gloo_unavailable, launch_two_ranks

pytestmark = pytest.mark.dist  # every test reads a run of two gloo ranks started by torchrun

HERE = Path(__file__).resolve().parent
WORKER = HERE / "clip_cov_dist_worker.py"


def test_two_ranks_select_like_one_process(tmp_path):
    why = gloo_unavailable()
    if why:
        pytest.skip(why)
    from clip_cov_dist_worker import main

    threads = torch.get_num_threads()
    try:
        main(tmp_path, "single")  # one process, all rows, here (the worker sets 1 thread)
    finally:
        torch.set_num_threads(threads)
    two = launch_two_ranks(WORKER, str(tmp_path), "dist", timeout=180)
    if two.returncode != 0 and not (tmp_path / "report_dist0.json").exists():
        pytest.skip(f"gloo could not start here:\n{(two.stdout + two.stderr)[-2000:]}")
    assert two.returncode == 0, two.stderr[-3000:]
    single = json.loads((tmp_path / "report_single0.json").read_text())
    for rank in (0, 1):
        # 0.3 of the step's 17 tokens: floor(5.1) = 5 selected, 5/17, on each rank (the step's token mean)
        assert json.loads((tmp_path / f"report_dist{rank}.json").read_text()) == pytest.approx(single)
    assert single == pytest.approx({"clip_cov": 5 / 17, "kl_cov": 5 / 17})
    for name in ("clip_cov", "kl_cov"):
        a = torch.load(tmp_path / f"{name}_single0.pt")
        for rank in (0, 1):
            b = torch.load(tmp_path / f"{name}_dist{rank}.pt")
            for k in a:
                torch.testing.assert_close(b[k], a[k], atol=1e-6, rtol=1e-5, msg=f"{name} rank {rank} {k}")
