"""Worker for tests/distributed/test_envs_dist.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/distributed/envs_dist_worker.py OUT_DIR MODEL_DIR

Trains 2 GRPO steps with an environment under `training.strategy` ddp, then fsdp, where the ranks
make different numbers of `continue_` calls: the `rank_turns` env ends rank 0's trajectories after
one turn and keeps rank 1's going to max_turns (3). The `scripted` generator (zoo.models.tiny) emits
short texts (two per group), so no turn is truncated. Each rank writes its summary per strategy.
Then one step with `question_turns` (turns by the question, not the rank) under ddp, then fsdp, whose
weights the test compares with one process's over the same two prompts (`equal_config`): each ddp
rank saves its weights, fsdp's rank 0 the whole (unsharded) weights.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TESTS = (
    Path(__file__).resolve().parents[1]
)  # tests/ (conftest: every tests/ folder on sys.path); its parent the repository
for p in (str(TESTS.parent), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

from zoo.core.registry import register  # noqa: E402
from zoo.models.tiny import ScriptedGenerator  # noqa: E402

CALLS: list[int] = []  # continue_ calls of this rank


class RankTurns:
    stop = ()

    def reset(self, row, seed):
        return [dict(m) for m in row["prompt"]], int(os.environ["RANK"])

    def step(self, rank, text):
        return ([{"role": "user", "content": "again"}], False, {}) if rank == 1 else (None, True, {})


@register("env", "rank_turns")
def rank_turns() -> RankTurns:
    return RankTurns()


class QuestionTurns:
    """Goes on to max_turns for questions with a "+", ends after one turn otherwise: the same
    trajectories in one process as over two ranks (the step's two prompts, seed 0, are
    "Calculate -2 / 2." and "Calculate -41 + 84.")."""

    stop = ()

    def reset(self, row, seed):
        return [dict(m) for m in row["prompt"]], "+" in row["question"]

    def step(self, more, text):
        return ([{"role": "user", "content": "again"}], False, {}) if more else (None, True, {})


@register("env", "question_turns")
def question_turns() -> QuestionTurns:
    return QuestionTurns()


def equal_config(model_dir, out, strategy):
    """One step of GRPO over 2 prompts with `question_turns` (the test repeats it in one process)."""
    from conftest import tiny_run_config

    task = {
        "name": "reasoning_gym",
        "dataset": "basic_arithmetic",
        "size": 16,
        "eval_size": 2,
        "fewshot": 0,
        "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
        "env": {"name": "question_turns", "max_turns": 3, "max_total_tokens": 200},
    }
    return tiny_run_config(
        model_dir,
        out,
        task=task,
        training={"strategy": strategy},
        sampling={"backend": "scripted"},
        eval={"enabled": False},
        budget={"steps": 1, "prompts_per_step": 2, "group_size": 2},
    )


def trained_params(cfg):
    """Train `cfg`; its policy's trainable parameters afterwards as whole tensors ({} on ranks > 0 under
    fsdp: torch.distributed.checkpoint's full state dict, gathered to rank 0 on the CPU; a collective)
    and the continue_ calls."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    from zoo.run import trainer

    states: list = []
    real = trainer.setup
    trainer.setup = lambda *a, **kw: states.append(real(*a, **kw)) or states[-1]
    CALLS.clear()
    try:
        trainer.train(cfg, progress=False)
    finally:
        trainer.setup = real
    policy = states[-1].models.policy
    trainable = {k.removeprefix("module.") for k, v in policy.named_parameters() if v.requires_grad}
    sharded = isinstance(policy, FSDPModule)  # gathered to rank 0 only; ddp's whole tensors stay on every rank
    opts = StateDictOptions(full_state_dict=True, cpu_offload=sharded, ignore_frozen_params=True)
    full = get_model_state_dict(policy, options=opts)  # DDP's "module." removed; DTensor shards gathered
    params = {k: v.detach().clone() for k, v in full.items() if k in trainable}
    return params, list(CALLS)


TEXTS = ("1+1", "22")  # row i of a call writes TEXTS[i % 2]: the two trajectories of a group differ


class Counted(ScriptedGenerator):
    """The scripted generator with different texts within a group (so rewards and advantages differ),
    counting its calls."""

    def continue_(self, prefix_ids, sampling, stop=(), /):
        import torch

        from zoo.core.generator_types import Continuation

        CALLS.append(len(prefix_ids))
        parts = [
            ScriptedGenerator(self.tokenizer, [TEXTS[i % 2]], model=self.model).continue_([p], sampling, stop)
            for i, p in enumerate(prefix_ids)
        ]
        T = max(c.ids.shape[1] for c in parts)
        pad = lambda x, v: torch.nn.functional.pad(x, (0, T - x.shape[1]), value=v)  # noqa: E731
        return Continuation(
            ids=torch.cat([pad(c.ids, self.tokenizer.pad_token_id) for c in parts]),
            mask=torch.cat([pad(c.mask, False) for c in parts]),
            logp_rollout=torch.cat([pad(c.logp_rollout, 0.0) for c in parts]),
            truncated=torch.cat([c.truncated for c in parts]),
            lengths=torch.cat([c.lengths for c in parts]),
            stopped_by=[x for c in parts for x in c.stopped_by],
            texts=[x for c in parts for x in c.texts],
        )


@register("generator", "scripted")
def scripted(policy, tokenizer) -> Counted:
    return Counted(tokenizer, TEXTS[:1], model=policy)


def main(out: Path, model_dir: Path) -> None:
    import torch.distributed as td
    from conftest import tiny_run_config

    from zoo.run import trainer

    td.init_process_group("gloo")
    rank = td.get_rank()
    res = {}
    for strategy in ("ddp", "fsdp"):
        CALLS.clear()
        task = {
            "name": "reasoning_gym",
            "dataset": "basic_arithmetic",
            "size": 16,
            "eval_size": 2,
            "fewshot": 0,
            "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
            "env": {"name": "rank_turns", "max_turns": 3, "max_total_tokens": 200},
        }
        cfg = tiny_run_config(
            model_dir,
            out / f"run_{strategy}",
            task=task,
            training={"strategy": strategy},
            sampling={"backend": "scripted"},
            eval={"enabled": False},
            budget={"prompts_per_step": 2, "group_size": 2},
        )
        summary = trainer.train(cfg, progress=False)
        res[strategy] = {"status": summary.get("status"), "steps": summary.get("steps"), "calls": list(CALLS)}
    import torch

    for strategy in ("ddp", "fsdp"):
        params, calls = trained_params(equal_config(model_dir, out / f"run_equal_{strategy}", strategy))
        if params:  # every ddp rank; fsdp's rank 0
            torch.save(params, out / f"equal_{strategy}_rank{rank}.pt")
        res[f"equal_calls_{strategy}"] = calls
    (out / f"rank{rank}.json").write_text(json.dumps(res))
    # both ranks leave together: a rank that tore gloo down while the other was still gathering fsdp's
    # full state dict aborted now and then ("terminate called without an active exception")
    td.barrier()
    td.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
