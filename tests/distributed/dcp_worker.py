"""Worker for tests/distributed/test_checkpoint_dcp.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/distributed/dcp_worker.py OUT_DIR MODEL_DIR

1. `zoo.run.trainer.train` on two ranks with today's data-parallel path (plain modules): per case an
   uninterrupted 3-step run (`OUT/<case>-full`) and one that crashes after step 1 (ZOO_FAIL_AT_STEP)
   and is resumed from its sharded checkpoint (`OUT/<case>-cut`); the test compares metrics.jsonl.
   Cases: grpo full fine-tuning and ppo LoRA under ddp, grpo LoRA under fsdp (through the trainer).
2. FSDP2: the tiny model wrapped by `fully_shard` (each decoder layer, then the root; its weights and
   AdamW states are DTensor shards), trained by a small loop of its own (LM loss on rows from a
   PromptStream plus noise from each rank's torch RNG) and checkpointed with zoo.run.checkpoint's
   save/restore: 4 uninterrupted steps, and 2 steps + save + restore into a differently initialised
   model + 2 steps. Each rank writes its losses and final (gathered) weights under OUT/fsdp/.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

TESTS = (
    Path(__file__).resolve().parents[1]
)  # tests/ (conftest: every tests/ folder on sys.path); its parent the repository
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

CASES = {  # name -> tiny_run_config overrides (3 steps, a checkpoint after every step)
    # full fine-tuning; the reference moves after every step (DeepSeekMath Alg. 1), so the checkpoint
    # holds it as a sharded part too (a wrong one changes kl/* after the resume)
    "grpo-full": dict(variant="grpo", ref_reset_every=1, training={"strategy": "ddp"}),
    "ppo-lora": dict(
        variant="ppo",
        budget={"group_size": 2},
        training={"strategy": "ddp"},
        model_opts={"lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
    ),
    # FSDP2 through the trainer: LoRA adapters on frozen, sharded base weights (DTensor shards in DCP)
    "grpo-lora-fsdp": dict(
        variant="grpo",
        training={"strategy": "fsdp"},
        model_opts={"lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
    ),
}


def run_cases(out: Path, model_dir: Path) -> None:
    from conftest import tiny_run_config

    from zoo.run import trainer

    for name, kw in CASES.items():
        kw = {**kw, "budget": {"steps": 3, **kw.get("budget", {})}, "eval": {"enabled": False}}
        trainer.train(tiny_run_config(model_dir, out / f"{name}-full", **kw), progress=False)
        cut = tiny_run_config(model_dir, out / f"{name}-cut", **kw)
        os.environ["ZOO_FAIL_AT_STEP"] = "1"
        try:
            trainer.train(cut, progress=False)
            raise AssertionError("ZOO_FAIL_AT_STEP=1 did not stop the run")
        except RuntimeError as e:
            assert "simulated crash" in str(e), e
        del os.environ["ZOO_FAIL_AT_STEP"]
        trainer.train(cut, resume=True, progress=False)


# ---------------------------------------------------------------- FSDP2: DTensor shards
def fsdp_state(seed: int, rank: int):
    """A RunState around the tiny model (init `seed`) wrapped by fully_shard, AdamW and a linear LR."""
    from torch.distributed.fsdp import fully_shard

    from zoo.models.tiny import tiny_model_and_tokenizer
    from zoo.step.types import Models, RunState
    from zoo.tasks import PromptStream

    model, tok = tiny_model_and_tokenizer(seed=seed)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 - 0.1 * k)
    rows = [{"x": i} for i in range(7)]
    return RunState(
        cfg=None,
        variant=None,
        slots=None,
        models=Models(policy=model, tokenizer=tok, reference=None),
        settings=None,
        optimizer=opt,
        scheduler=sched,
        critic_optimizer=None,
        critic_scheduler=None,
        stream=PromptStream(rows, seed=3),
        resample_stream=PromptStream(rows, seed=4),
        task=None,
        rewards=[],
        reward_names=[],
        reference=None,
        device=torch.device("cpu"),
    )


def fsdp_step(st, rank: int) -> float:
    """One optimizer step on this rank's row of the stream's next two, with noise from the torch RNG:
    returns the loss summed over ranks."""
    from zoo.core import dist

    row = st.stream.take(2)[rank]
    ids = (torch.randint(5, 100, (2, 6)) + row["x"]) % 100 + 5
    loss = st.models.policy(input_ids=ids, labels=ids).loss
    loss.backward()
    st.optimizer.step()
    st.optimizer.zero_grad(set_to_none=True)
    st.scheduler.step()
    st.step += 1
    return float(dist.all_reduce_sum(loss.detach()))


def gathered(model) -> dict[str, torch.Tensor]:
    from zoo.backends.train.checkpoint_dcp import full

    return {k: full(v).detach().clone() for k, v in model.state_dict().items()}


def run_fsdp(out: Path, rank: int) -> None:
    from torch.distributed.tensor import DTensor

    from zoo.backends.train import checkpoint as ckpt
    from zoo.run.checkpoint import restore_checkpoint, save_checkpoint

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(100 + rank)
    st = fsdp_state(7, rank)
    report = {"dtensor": all(isinstance(p, DTensor) for p in st.models.policy.parameters())}
    report["full"] = [fsdp_step(st, rank) for _ in range(4)]
    full_params = gathered(st.models.policy)

    torch.manual_seed(100 + rank)
    st = fsdp_state(7, rank)
    report["cut"] = [fsdp_step(st, rank) for _ in range(2)]
    save_checkpoint(st, out, None)
    saved = gathered(st.models.policy)  # collective
    if rank == 0:  # what zoo.backends.train.checkpoint_dcp.read_full must put together from the two ranks' shards
        torch.save(saved, out / "saved_params.pt")
    torch.manual_seed(12345)  # the restore must bring back each rank's RNG state
    st = fsdp_state(8, rank)  # other initial weights: the restore must overwrite every one
    report["fresh_differs"] = any(not torch.equal(v, full_params[k]) for k, v in gathered(st.models.policy).items())
    directory = out / "checkpoint"
    restore_checkpoint(st, ckpt.load(directory), directory)
    report["restored_step"] = st.step
    report["cut"] += [fsdp_step(st, rank) for _ in range(2)]
    resumed = gathered(st.models.policy)
    report["max_param_diff"] = max(float((resumed[k] - full_params[k]).abs().max()) for k in full_params)
    (out / f"report_rank{rank}.json").write_text(json.dumps(report))


def main(out: Path, model_dir: Path) -> None:
    import torch.distributed as td

    torch.set_num_threads(1)
    td.init_process_group("gloo")
    rank = td.get_rank()
    run_cases(out, model_dir)
    run_fsdp(out / "fsdp", rank)
    td.barrier()
    td.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
