"""Worker for tests/test_envs_dist.py, started as two real gloo processes by

    torchrun --standalone --nproc_per_node 2 tests/envs_dist_worker.py OUT_DIR MODEL_DIR

Trains 2 GRPO steps with an environment under `training.strategy` ddp, then fsdp, where the ranks
make different numbers of `continue_` calls: the `rank_turns` env ends rank 0's trajectories after
one turn and keeps rank 1's going to max_turns (3). The `scripted` generator (zoo.testing) emits
the same short text every turn, so no turn is truncated. Each rank writes its summary per strategy.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from zoo.registry import register  # noqa: E402
from zoo.testing import ScriptedGenerator  # noqa: E402

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


class Counted(ScriptedGenerator):
    def continue_(self, prefix_ids, sampling, stop=(), /):
        CALLS.append(len(prefix_ids))
        return super().continue_(prefix_ids, sampling, stop)


@register("generator", "scripted")
def scripted(policy, tokenizer) -> Counted:
    return Counted(tokenizer, ["1+1"], model=policy)


def main(out: Path, model_dir: Path) -> None:
    import torch.distributed as td

    from conftest import tiny_run_config
    from zoo import trainer

    td.init_process_group("gloo")
    rank = td.get_rank()
    res = {}
    for strategy in ("ddp", "fsdp"):
        CALLS.clear()
        task = {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 16, "eval_size": 2, "fewshot": 0,
                "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
                "env": {"name": "rank_turns", "max_turns": 3, "max_total_tokens": 200}}
        cfg = tiny_run_config(model_dir, out / f"run_{strategy}", task=task, training={"strategy": strategy},
                              sampling={"backend": "scripted"}, eval={"enabled": False},
                              budget={"prompts_per_step": 2, "group_size": 2})
        summary = trainer.train(cfg, progress=False)
        res[strategy] = {"status": summary.get("status"), "steps": summary.get("steps"), "calls": list(CALLS)}
    (out / f"rank{rank}.json").write_text(json.dumps(res))
    td.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
