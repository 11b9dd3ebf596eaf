"""`training.strategy` against the processes the run has (`WORLD_SIZE` under a launcher, or
`zoo validate --nproc N`) and the autocast."""

from __future__ import annotations

from zoo.backends.train.strategy import STRATEGIES
from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


def check_strategy(name: str, world_size: int, autocast: str, launched: bool = True) -> None:
    """Raise ValueError where `training.strategy` cannot work: an unknown name, several processes with
    `single` (nothing would combine their gradients), fsdp without a launcher (FSDP2 needs a process
    group, also of one process: `launched` = WORLD_SIZE is set), or fp16 autocast (no gradient scaling
    here: fp16 gradients underflow silently without a GradScaler)."""
    if name not in STRATEGIES:
        raise ValueError(f"training.strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    if name == "fsdp" and not launched:
        raise ValueError(
            "training.strategy fsdp needs a launcher, also for one process: zoo run RUN.yaml --nproc 1 "
            "(or torchrun --standalone --nproc_per_node 1 -m zoo.cli run RUN.yaml; "
            "zoo validate RUN.yaml --nproc 1 checks it as launched)"
        )
    if name == "single" and world_size > 1:
        raise ValueError(
            f"training.strategy single runs one process, but the launcher started {world_size}: "
            "set training.strategy ddp or fsdp (--set training.strategy=ddp)"
        )
    if autocast == "fp16":
        raise ValueError(
            "model_opts.autocast fp16 is not supported: training in fp16 needs a gradient scaler, "
            "which zoo does not have; use bf16 (or auto, none)"
        )


@check("strategy", "before_load")
def strategy(s: BeforeLoad, rep: Report) -> None:
    """`check_strategy` for this run's processes."""
    try:
        check_strategy(s.cfg.training.strategy, s.world_size, s.cfg.model_opts.autocast, launched=s.launched)
    except ValueError as e:
        rep.errors.append(str(e))
