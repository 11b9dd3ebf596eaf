"""Worker of tests/distributed/test_distill_dist.py: the teacher's centred signal (zoo/step/distill.py,
its mean over every trained token of every rank) on an uneven split of the rows over two gloo ranks
(`dist`), or on every row in one process (`single`); saves each rank's advantages. Under `dist` a second
round gives rank 0 no rows (it calls `distill_empty`, as the step does) and rank 1 all of them. Then one
optimizer step with the full-vocabulary term (`vocab_update`), its parameters saved."""

import dataclasses
import sys
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parents[1]  # tests/ (every tests/ folder on sys.path); its parent the repository
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

from dist_worker import SHARES, build_case, run_update  # noqa: E402


def case():
    """dist_worker's batch with old and teacher log-probs on its loss mask, and a centred, discounted spec."""
    from zoo.config.distill import DistillSignal, DistillSpec
    from zoo.step.distill import FIELD

    _, _, batch, _, _ = build_case("token_mean")
    g = torch.Generator().manual_seed(3)
    m = batch.loss_mask
    old = torch.where(m, -2.0 + torch.randn(m.shape, generator=g), 0.0)
    teacher = torch.where(m, -2.0 + torch.randn(m.shape, generator=g), 0.0)
    batch = dataclasses.replace(batch, logp_old=old, extras={FIELD: teacher})

    class _Slots:
        distill = DistillSignal(DistillSpec(beta=0.7, gamma=0.5, center=True))

    return batch, _Slots()


def vocab_case():
    """build_case's model and batch with a teacher's full log-probs and the gkd variant's slots (the
    distill_vocab loss term, JSD 0.5)."""
    from zoo.config.variant import load_variant
    from zoo.step.types import Slots

    model, tok, batch, _, s = build_case("token_mean")
    g = torch.Generator().manual_seed(4)
    V = model.config.vocab_size
    t = torch.log_softmax(3 * torch.randn(*batch.loss_mask.shape, V, generator=g), -1)
    batch = dataclasses.replace(batch, extras={"logp_teacher_vocab": t})
    return model, tok, batch, Slots.of(load_variant("gkd")), s


def vocab_update(out: Path, mode: str, rank: int) -> None:
    """One optimizer step with the full-vocabulary term on this rank's rows (all rows in `single`)."""
    model, tok, batch, slots, s = vocab_case()
    rows = batch if mode == "single" else batch.select(SHARES[rank])
    m = run_update(model, tok, rows, slots, s)
    torch.save({k: v.detach() for k, v in model.named_parameters()}, out / f"vocab_{mode}{rank}.pt")
    torch.save({"loss": torch.tensor(m["loss/distill_vocab"])}, out / f"vocab_loss_{mode}{rank}.pt")


def main(out: Path, mode: str) -> None:
    from zoo.step.distill import distill, distill_empty

    torch.set_num_threads(1)
    rank = 0
    if mode == "dist":
        import torch.distributed as td

        td.init_process_group("gloo")
        rank = td.get_rank()
    batch, slots = case()
    rows = batch if mode == "single" else batch.select(SHARES[rank])
    got, m = distill(rows, slots)
    torch.save({"advantages": got.advantages, "kl": torch.tensor(m["distill/reverse_kl"])}, out / f"{mode}{rank}.pt")
    if mode == "dist":  # then rank 0 has no rows (the step skips distill there and joins the sum)
        if rank == 0:
            distill_empty(slots)
        else:
            got, m = distill(batch, slots)
            torch.save({"advantages": got.advantages, "kl": torch.tensor(m["distill/reverse_kl"])}, out / "empty1.pt")
    vocab_update(out, mode, rank)
    if mode == "dist":
        td.barrier()
        td.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
