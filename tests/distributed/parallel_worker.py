"""Worker for tests/distributed/test_parallel.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/distributed/parallel_worker.py STRATEGY OUT_DIR [MODEL_DIR]

STRATEGY is ddp or fsdp (zoo/backends/train/strategy.py). For each case of CASES (full fine-tuning or LoRA x two
aggregations) each rank runs `update` with 2 minibatches over its own, unequal share of one fixed
batch (dist_worker.SHARES: rank 0 one row, rank 1 four; micro-batch 1, so rank 0 has fewer
micro-batches in the first optimizer step and none in the second) and saves its metrics and its
full parameters afterwards. The test repeats each case in one process over the same rows.
With MODEL_DIR it also trains 2 steps of a run file under the strategy (`zoo.run.trainer.train`).
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

from dist_worker import AGGREGATES, SHARES, build_case  # noqa: E402

CASES = [(lora, agg) for lora in (False, True) for agg in AGGREGATES]
PERM_SEED = 5  # the generator that shuffles each rank's rows into minibatches
LR, MAX_GRAD_NORM = 1.0, 0.05


def case_name(lora: bool, agg: str) -> str:
    return f"{'lora' if lora else 'full'}_{agg}"


def build(lora: bool, agg: str):
    """(model, tok, batch, slots, settings) of one case, identical in every process: 2 minibatches,
    micro-batch 1, clipping to MAX_GRAD_NORM; under LoRA the adapters' B matrices are random (seeded)
    so that A gets gradients too."""
    from dataclasses import replace

    from zoo.models import apply_lora

    model, tok, batch, slots, s = build_case(agg)
    if lora:
        model = apply_lora(model, {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
        g = torch.Generator().manual_seed(13)
        with torch.no_grad():
            for _n, p in model.named_parameters():
                if p.requires_grad:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model, tok, batch, slots, replace(s, minibatches=2, micro_batch=1, max_grad_norm=MAX_GRAD_NORM)


def full_params(model) -> dict[str, torch.Tensor]:
    """Every trainable parameter as a whole tensor (an FSDP2 shard all-gathered: a collective)."""
    out = {}
    for k, v in model.named_parameters():
        if v.requires_grad:
            t = v.detach()
            out[k] = (t.full_tensor() if hasattr(t, "full_tensor") else t).clone()
    return out


def run_case(lora: bool, agg: str, name: str | None, rank: int | None) -> tuple[dict, dict]:
    """(metrics, trainable params after update) of one case; `name`: the strategy (None: one process
    over all rows). One process: the two minibatches are the ranks' minibatches joined, each updated
    with one optimizer step, in order."""
    from zoo.backends.train import strategy
    from zoo.step.types import Models
    from zoo.step.update import update

    model, tok, batch, slots, s = build(lora, agg)
    device = torch.device("cpu")
    if name is not None:
        par = strategy.wrap(model, None, None, name, device)
        mine = batch.select(SHARES[rank])
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    models = Models(policy=model, tokenizer=tok, reference=None, parallel=par if name else None)
    if name is not None:
        m = update(mine, models, slots, s, opt, None, generator=torch.Generator().manual_seed(PERM_SEED))
        return m, full_params(model)
    from dataclasses import replace

    steps = minibatch_rows(s.minibatches)
    ms = [
        update(batch.select(torch.tensor(rows)), models, slots, replace(s, minibatches=1), opt, None) for rows in steps
    ]
    m = {k: sum(x[k] for x in ms) / len(ms) for k in ("loss/policy", "optim/grad_norm")}
    return m, full_params(model)


def minibatch_rows(minibatches: int) -> list[list[int]]:
    """The rows of each optimizer step over both ranks: each rank's share shuffled by its generator
    (seeded PERM_SEED, as in `update`) and split into `minibatches`, joined over ranks."""
    steps: list[list[int]] = [[] for _ in range(minibatches)]
    for share in SHARES:
        perm = torch.randperm(len(share), generator=torch.Generator().manual_seed(PERM_SEED))
        for k, part in enumerate(perm.tensor_split(minibatches)):
            steps[k] += [share[int(i)] for i in part.sort().values]
    return [sorted(x) for x in steps]


def run_train(out: Path, model_dir: Path, name: str, rank: int) -> dict:
    """2 steps of reinforce_pp (full fine-tuning: the reference is a copy, sharded too under fsdp;
    KL in the reward with an adaptive beta) and 2 of GRPO with LoRA, through `zoo.run.trainer.train`."""
    import torch.distributed as td
    from conftest import tiny_run_config

    from zoo.models.tiny import tiny_reward_model_and_tokenizer
    from zoo.run import trainer

    rm_dir = out / "reward_model"  # the LoRA run also scores with a reward model: each rank its own rows
    if rank == 0:
        rm, rm_tok = tiny_reward_model_and_tokenizer(seed=3)
        rm.save_pretrained(rm_dir)
        rm_tok.save_pretrained(rm_dir)
    td.barrier()
    res = {}
    for label, variant, extra in (
        ("full", "reinforce_pp", {"set": {"kl.beta": 0.1, "kl.adaptive": {"target": 0.5, "horizon": 8}}}),
        (
            "lora",
            "grpo",
            {
                "model_opts": {"lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
                "rewards": ["correctness", {"name": "reward_model", "model": str(rm_dir), "batch_size": 3}],
            },
        ),
    ):
        states: list = []
        real_setup = trainer.setup
        trainer.setup = lambda *a, **kw: states.append(real_setup(*a, **kw)) or states[-1]  # noqa: B023 (this iteration's run)
        cfg = tiny_run_config(
            model_dir,
            out / f"run_{label}",
            variant=variant,
            budget={"prompts_per_step": 2},
            training={"strategy": name},
            eval={"size": 2, "samples": 2},
            **extra,
        )
        summary = trainer.train(cfg, progress=False)
        trainer.setup = real_setup
        torch.save(full_params(states[-1].models.policy), out / f"train_{label}_rank{rank}.pt")
        res[label] = {
            "status": summary.get("status"),
            "steps": summary.get("steps"),
            "grad_norm": summary.get("optim/grad_norm"),
            "updates": summary.get("optim/updates"),
            "reward_model": summary.get("reward/reward_model"),
        }
    return res


def injected_correct(question: str) -> bool:
    """Whether a prompt's group gets one correct completion (kept by dynamic sampling) or none
    (dropped): decided by the question's text alone, so the same in every process."""
    import zlib

    return zlib.crc32(question.encode()) % 2 == 0


def run_dynamic_sampling(out: Path, model_dir: Path, name: str) -> list[list]:
    """2 DAPO steps (dynamic sampling, up to 3 refill rounds) with injected rewards: a group's first
    completion is correct when `injected_correct(question)`, every other completion wrong. Returns
    the decisions [[step, question, kept], ...] this process made (each group once)."""
    from conftest import tiny_run_config

    from zoo.rewards.compute import RewardScores
    from zoo.run import trainer
    from zoo.step import pipeline as sample  # the stages of each resampling round

    decisions: list[list] = []
    now: dict = {}
    real = (sample.generate, sample.compute_rewards, sample.keep_rows)

    def generate(st, rows, offset):
        now["step"] = st.step
        return real[0](st, rows, offset)

    def rewards(fns, completions, rows):
        now["rows"] = rows
        first = [i == 0 or rows[i] is not rows[i - 1] for i in range(len(rows))]  # rows are prompt-major
        obj = torch.zeros(len(rows), len(fns))
        obj[:, 0] = torch.tensor([float(f and injected_correct(r["question"])) for f, r in zip(first, rows)])
        return RewardScores(obj, [0] * len(fns))

    def keep_rows(per_row, group_ids, slots):
        keep = real[2](per_row, group_ids, slots)
        for i, r in enumerate(now["rows"]):
            if i == 0 or now["rows"][i - 1] is not r:
                decisions.append([now["step"], r["question"], bool(keep[i])])
        return keep

    sample.generate, sample.compute_rewards, sample.keep_rows = generate, rewards, keep_rows
    try:
        cfg = tiny_run_config(
            model_dir,
            out / "run_dynamic",
            variant="dapo",
            training={"strategy": name},
            budget={"prompts_per_step": 4, "max_resample_rounds": 3},
            eval={"enabled": False},
        )
        trainer.train(cfg, progress=False)
    finally:
        sample.generate, sample.compute_rewards, sample.keep_rows = real
    return decisions


def main(name: str, out: Path, model_dir: Path | None) -> None:
    import torch.distributed as td

    torch.set_num_threads(1)
    td.init_process_group("gloo")
    rank = td.get_rank()
    report: dict = {"rank": rank}
    for lora, agg in CASES:
        m, params = run_case(lora, agg, name, rank)
        report[case_name(lora, agg)] = {k: m[k] for k in ("loss/policy", "optim/grad_norm", "optim/updates")}
        torch.save(params, out / f"params_{case_name(lora, agg)}_rank{rank}.pt")
    if model_dir is not None:
        report["train"] = run_train(out, model_dir, name, rank)
        report["dynamic_sampling"] = run_dynamic_sampling(out, model_dir, name)
    (out / f"report_rank{rank}.json").write_text(json.dumps(report))
    td.barrier()
    td.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
