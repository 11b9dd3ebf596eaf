"""The teacher's centred signal under data parallelism (zoo/step/distill.py): two gloo ranks holding 1 and
4 of the 5 rows give each row the advantage one process gives it on all rows (the mean is over every rank),
and a rank with no rows joins the mean's sum without changing it; an optimizer step with the
full-vocabulary term (distill_vocab) on two ranks makes the parameters one process makes."""

from pathlib import Path

import pytest
import torch
from conftest import run_two_ranks

pytestmark = pytest.mark.dist  # starts two gloo ranks under torchrun

HERE = Path(__file__).resolve().parent
WORKER = HERE / "distill_dist_worker.py"


def test_two_ranks_give_the_distill_advantage_of_one_process(tmp_path):
    from dist_worker import SHARES
    from distill_dist_worker import main

    threads = torch.get_num_threads()
    try:
        main(tmp_path, "single")
    finally:
        torch.set_num_threads(threads)
    run_two_ranks(WORKER, str(tmp_path), "dist", timeout=120)
    one = torch.load(tmp_path / "single0.pt")
    for rank in (0, 1):
        two = torch.load(tmp_path / f"dist{rank}.pt")
        want = one["advantages"][SHARES[rank]]
        torch.testing.assert_close(two["advantages"], want[:, : two["advantages"].shape[1]], rtol=1e-5, atol=1e-6)
        assert float(two["kl"]) == pytest.approx(float(one["kl"]), rel=1e-6)
    a = torch.load(tmp_path / "vocab_single0.pt")  # the full-vocabulary term's update: DDP == one process
    for rank in (0, 1):
        b = torch.load(tmp_path / f"vocab_dist{rank}.pt")
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6, msg=f"rank {rank} {k}")
    loss = [float(torch.load(tmp_path / f"vocab_loss_dist{r}.pt")["loss"]) for r in (0, 1)]
    assert loss[0] > 0 and loss[0] == pytest.approx(loss[1], rel=1e-6)
    assert loss[0] == pytest.approx(float(torch.load(tmp_path / "vocab_loss_single0.pt")["loss"]), rel=1e-5)
    alone = torch.load(tmp_path / "empty1.pt")  # a rank with no rows joined the sum and changed nothing
    torch.testing.assert_close(alone["advantages"], one["advantages"], rtol=1e-5, atol=1e-6)
