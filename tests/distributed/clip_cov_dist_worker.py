"""Worker of tests/distributed/test_clip_cov_dist.py: one optimizer step with a selecting clip rule (clip_cov,
kl_cov) on dist_worker's batch, either in one process on every row (`single`) or as one of two gloo
ranks holding an uneven share of the rows (`dist`); saves the parameters after the step."""

import dataclasses
import json
import sys
from pathlib import Path

import torch

TESTS = (
    Path(__file__).resolve().parents[1]
)  # tests/ (conftest: every tests/ folder on sys.path); its parent the repository
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

from dist_worker import SHARES, build_case, run_update  # noqa: E402

CLIPS = {
    "clip_cov": {"name": "clip_cov", "ratio": 0.3, "cov_lb": -1.0e9, "cov_ub": 1.0e9},
    "kl_cov": {"name": "kl_cov", "ratio": 0.3, "beta": 1.0},
}


def case(name: str):
    """dist_worker's case with old log-probs off the policy (so r != 1) and the clip rule `name`."""
    from zoo.config.variant import load_variant
    from zoo.step.types import Slots

    model, tok, batch, _, s = build_case("token_mean")
    g = torch.Generator().manual_seed(5)
    old = torch.where(batch.loss_mask, -4.0 + torch.randn(batch.loss_mask.shape, generator=g), 0.0)
    slots = Slots.of(load_variant("grpo", {"aggregate": "token_mean", "kl": "none", "clip": CLIPS[name]}))
    return model, tok, dataclasses.replace(batch, logp_old=old), slots, s


def main(out: Path, mode: str) -> None:
    torch.set_num_threads(1)
    rank = 0
    if mode == "dist":
        import torch.distributed as td

        td.init_process_group("gloo")
        rank = td.get_rank()
    report = {}
    for name in CLIPS:
        model, tok, batch, slots, s = case(name)
        rows = batch if mode == "single" else batch.select(SHARES[rank])
        report[name] = run_update(model, tok, rows, slots, s)["clip/selected_frac"]
        torch.save({k: v.detach() for k, v in model.named_parameters()}, out / f"{name}_{mode}{rank}.pt")
    (out / f"report_{mode}{rank}.json").write_text(json.dumps(report))
    if mode == "dist":
        td.barrier()
        td.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
