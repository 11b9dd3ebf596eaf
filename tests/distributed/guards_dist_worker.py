"""Worker for tests/run/test_guards.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/distributed/guards_dist_worker.py OUT_DIR

Both ranks run one `zoo.step.update.update` on their share of tests/distributed/dist_worker.py's batch; only rank 1's clip
rule gives a NaN loss. Each rank writes what it decided (skipped or applied) and how far its
weights moved to OUT_DIR/guards_rank{r}.json: the skip must be the same on both ranks.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

TESTS = (
    Path(__file__).resolve().parents[1]
)  # tests/ (conftest: every tests/ folder on sys.path); its parent the repository
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)


def main(out: Path) -> None:
    import torch.distributed as td
    from dist_worker import SHARES, build_case, run_update

    torch.set_num_threads(1)
    td.init_process_group("gloo")
    rank = td.get_rank()
    model, tok, batch, slots, s = build_case("token_mean")
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    if rank == 1:
        clip = slots.clip

        def nan_clip(logp, old, adv, mask):
            res = clip(logp, old, adv, mask)
            return replace(res, loss=res.loss * float("nan"))

        slots = replace(slots, clip=nan_clip)
    m = run_update(model, tok, batch.select(SHARES[rank]), slots, s)
    moved = max(float((p.detach() - before[k]).abs().max()) for k, p in model.named_parameters())
    report = {
        "skipped": m["optim/skipped"],
        "updates": m["optim/updates"],
        "moved": moved,
        "grads_left": any(p.grad is not None for p in model.parameters()),
    }
    (out / f"guards_rank{rank}.json").write_text(json.dumps(report))
    td.barrier()
    td.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
