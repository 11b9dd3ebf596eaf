"""Worker for tests/distributed/test_image_parallel.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/distributed/image_parallel_worker.py STRATEGY OUT_DIR

STRATEGY is ddp or fsdp. Each rank builds the same tiny Qwen2-VL and the same rollout of prompts with
images (`build`), runs one `update` on its own, unequal share of the rows (SHARES: rank 0 one row,
rank 1 five; micro-batch 2, so rank 0 pads with a zero-loss micro-batch) and saves its metrics and
full parameters; the test runs the same update in one process over all rows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parents[1]
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

SHARES = [[0], [1, 2, 3, 4, 5]]
LR = 1.0


def build():
    """(model, tokenizer, batch with images and advantages, slots, settings): identical in every process."""
    from dataclasses import replace

    from PIL import Image

    from zoo.backends.generate.hf import generate_rollout
    from zoo.config.variant import load_variant
    from zoo.models.tiny_vlm import tiny_qwen2vl_and_processor
    from zoo.step.types import Slots, StepSettings

    model, proc = tiny_qwen2vl_and_processor(seed=7)
    prompts = [[{"role": "user", "content": q}] for q in ("Colour?", "How many?", "Which is larger?")]
    images = [
        [Image.new("RGB", (40, 30), (255, 0, 0))],
        [Image.new("RGB", (32, 32), (0, 200, 0)), Image.new("RGB", (20, 48), (90, 90, 90))],
        [Image.new("RGB", (24, 40), (0, 0, 255))],
    ]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        b = generate_rollout(
            model, proc.tokenizer, prompts, group_size=2, max_new_tokens=4, images=images, processor=proc
        )
        adv = torch.randn(b.size)[:, None].expand_as(b.loss_mask) * b.loss_mask  # [N, T]
    b = replace(b, advantages=adv.contiguous())
    slots = Slots.of(load_variant("grpo", {"aggregate": "token_mean", "kl": "none"}))
    s = StepSettings(1.0, 2, 4, 1, 1, "none", None)
    return model, proc.tokenizer, b, slots, s


def full_params(model) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in model.named_parameters():
        t = v.detach()
        out[k] = (t.full_tensor() if hasattr(t, "full_tensor") else t).clone()
    return out


def run(name: str | None, rank: int | None) -> tuple[dict, dict]:
    """(metrics, parameters after one update): `name` the strategy over rank's share, None one process."""
    from zoo.backends.train import strategy
    from zoo.step.types import Models
    from zoo.step.update import update

    model, tok, batch, slots, s = build()
    par = strategy.wrap(model, None, None, name, torch.device("cpu")) if name else None
    rows = batch.select(SHARES[rank]) if name else batch
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    m = update(rows, Models(policy=model, tokenizer=tok, reference=None, parallel=par), slots, s, opt, None)
    return m, full_params(model)


def main(name: str, out: Path) -> None:
    import torch.distributed as td

    td.init_process_group("gloo")
    rank = td.get_rank()
    torch.set_num_threads(1)
    m, params = run(name, rank)
    (out / f"report_rank{rank}.json").write_text(json.dumps({k: float(v) for k, v in m.items()}))
    torch.save(params, out / f"params_rank{rank}.pt")
    td.barrier()
    td.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1], Path(sys.argv[2]))
