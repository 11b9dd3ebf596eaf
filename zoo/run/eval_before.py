"""One arm at a time computes a study's shared evaluation before training; the others train meanwhile.

Every arm of a study starts from the same model, so its evaluation before training is one computation
(zoo.run.eval_record). Arms that start together (`zoo ablate --ray`) used to compute it side by side, each
spending the minutes the evaluation takes. Now the arm that computes it holds
`<study>/eval_before/<key>.lock` (an fcntl lock, released by the OS when its process dies); an arm that
finds it held **defers**: it trains, and after its last step waits for the lock, reads the cached result,
and computes it only when the other arm left none (it died), on its initial policy.

Deferring needs that initial policy to be recoverable after training: a LoRA policy whose every `lora_B`
is zero at the start (peft's default init, so the adapters add exactly 0 and the policy equals its base
model) evaluated with the adapters disabled (peft `disable_adapter()`), by the run's own HF generator
(a vLLM engine or `eval.backend` holds weights of its own), in one process. Otherwise the arm waits
for the lock at the start, as it would have spent the time computing. The choice is ours (no peer shares
an evaluation between the arms of an ablation).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Any, Iterator

from torch import nn

from zoo.models.policy import is_peft
from zoo.run.eval_record import CACHE_DIR


@contextlib.contextmanager
def computing(study_dir: Path | str, key: str, *, wait: bool) -> Iterator[bool]:
    """Hold `<study_dir>/eval_before/<key>.lock` inside the block: yields True when held. With `wait=False`
    yields False at once when another process holds it (the block then must not compute)."""
    path = Path(study_dir) / CACHE_DIR / f"{key}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lora_at_init(model: nn.Module) -> bool:
    """Whether `model` is a peft LoRA model whose adapters add exactly nothing yet (every lora_B zero)."""
    if not is_peft(model):
        return False
    bs = [p for name, p in model.named_parameters() if "lora_B" in name]
    return bool(bs) and all(not bool(p.detach().any()) for p in bs)


@contextlib.contextmanager
def initial_policy(model: nn.Module) -> Iterator[Any]:
    """The policy as it was before training, for a deferred evaluation: peft's adapters disabled."""
    with model.disable_adapter():
        yield model
