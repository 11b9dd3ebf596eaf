"""Worker for tests/distributed/test_bench_ranks.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/distributed/bench_ranks_worker.py OUT_DIR

For STRATEGY in (ddp, fsdp) each rank builds the same tiny Llama (zoo.models.tiny, vocab 105: the
embedding's 105 rows split 53/52 under FSDP2), wraps it (zoo.backends.train.strategy.wrap), takes one AdamW step
and counts what it holds with the bench's `zoo.bench.memory.memory_breakdown` (weights, gradients,
optimizer state in MB). Rank 0 writes OUT_DIR/STRATEGY.json: every rank's counts and, from an
unwrapped copy in the same process, the full model's parameter bytes, its number of parameter tensors and its buffers' bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

# tests/ (conftest: every tests/ folder on sys.path); its parent the repository
TESTS = Path(__file__).resolve().parents[1]
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

from zoo.backends.train import strategy  # noqa: E402
from zoo.bench.memory import memory_breakdown  # noqa: E402
from zoo.core import dist  # noqa: E402
from zoo.models.tiny import tiny_model_and_tokenizer  # noqa: E402


def counts(name: str) -> dict:
    model, _ = tiny_model_and_tokenizer(seed=0)
    full = {
        "bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "tensors": sum(1 for _ in model.parameters()),
        "buffers": sum(b.numel() * b.element_size() for b in model.buffers()),
    }
    par = strategy.wrap(model, None, None, name, torch.device("cpu"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    ids = torch.arange(8).view(1, 8) % 100
    out = strategy.trained(par, "policy", model)(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    strategy.backward(out.logits.float().pow(2).mean(), par)
    opt.step()
    st = SimpleNamespace(
        models=SimpleNamespace(policy=model, critic=None),
        reference=None,
        optimizer=opt,
        critic_optimizer=None,
        rewards=[],
    )
    mem = memory_breakdown(st, runtime_mb=0.0, peak_mb=0.0)
    dtensors = sum(1 for p in model.parameters() if hasattr(p, "to_local"))
    row = {k: round(mem[f"{k}_mb"] * 2**20) for k in ("weights", "gradients", "optimizer")}  # bytes
    return {"full": full, "rank": {**row, "dtensor_params": dtensors}}


def main(out_dir: str) -> None:
    dist.init_from_env()
    for name in ("ddp", "fsdp"):
        res = counts(name)
        rows = dist.all_gather_object(res["rank"])
        if dist.rank() == 0:
            Path(out_dir, f"{name}.json").write_text(json.dumps({"full": res["full"], "ranks": rows}))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
