"""Checkpoints a restart resumes from: one file, written atomically (tmp file + rename), plus the
previous one.

Holds the policy's trainable weights (the LoRA adapter, or the full state dict), the critic, every
optimizer and scheduler, the RNG states (python, numpy, torch, CUDA), the data-stream position, the
step, the controllers' state (the adaptive KL beta), a moved reference (only after `ref_reset_every` moved it) and the W&B
run id. The reference is otherwise *not* saved: it is the initial policy, rebuilt from the model
source on resume (docs/concepts/algorithms.md conventions).

Files: `checkpoint/state.pt` (the latest) and `checkpoint/state.prev.pt` (the one before, kept so a
damaged latest file costs one checkpoint interval, not the run). Only tensors and plain Python values
(numbers, strings, None, lists, tuples, dicts) are stored, and `load` reads with
`torch.load(weights_only=True)`: a checkpoint from someone else is data, it cannot run code
(docs/reference/cli.md, Trust). A damaged or refused file raises CheckpointError naming it and the
options; `load` never falls back to the previous file by itself (the user moves the damaged one away).

Under data parallelism the weights and optimizer states live in a shards folder that state.pt names
(zoo.backends.train.checkpoint_dcp); `clear` removes those folders too and `check_world_size` refuses a resume under
another number of processes.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from zoo.core.faults import write_guard
from zoo.models import is_peft

log = logging.getLogger(__name__)

FILE = "state.pt"
PREV = "state.prev.pt"


class CheckpointError(ValueError):
    """A checkpoint file cannot be used (damaged, or holds more than tensors and plain values); the
    message names the file and what to do."""


def policy_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Trainable weights only for a peft model (the adapter), the full state dict otherwise."""
    if is_peft(model):
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def load_policy_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    if is_peft(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state)
    else:
        model.load_state_dict(state)


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train (e.g. a LoRA critic's adapters and value head, not its frozen base,
    which is rebuilt from the model source on resume)."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load `trainable_state` back. Raises RuntimeError when a trainable parameter is missing."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if unexpected or trainable & set(missing):
        raise RuntimeError(
            f"checkpoint does not match the model: missing {sorted(trainable & set(missing))[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )


def rng_state() -> dict[str, Any]:
    """The python, numpy, torch (and CUDA) RNG states in weights-only-loadable types (numpy's key
    array as an int64 tensor [624])."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    out = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
    }
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(directory: Path, state: dict[str, Any]) -> Path:
    """Write `state` to directory/state.pt atomically, keeping the file it replaces as state.prev.pt;
    a crash mid-write leaves both previous files. Raises WriteError (zoo.core.faults: disk full, read-only
    folder; the temporary file is removed)."""
    path = directory / FILE
    with write_guard(directory):
        directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{FILE}.tmp.{os.getpid()}"
    with write_guard(path, tmp=tmp):
        with open(tmp, "wb") as f:
            _save_reporting_os_errors(state, f)
        if path.exists():
            os.replace(path, directory / PREV)
        os.replace(tmp, path)
    return path


class _RecordingWriter:
    """A file's `write` that remembers the OSError it raised (torch's zip writer turns it into a
    RuntimeError "unexpected pos ...", losing errno ENOSPC)."""

    def __init__(self, f: Any) -> None:
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _save_reporting_os_errors(state: dict[str, Any], f: Any) -> None:
    """torch.save to the open file `f`; a failed write raises the OSError itself (errno kept), any
    other serialization failure an OSError with its first line."""
    w = _RecordingWriter(f)
    try:
        torch.save(state, w)
    except RuntimeError as e:
        if w.error is not None:
            raise w.error from None
        raise OSError(f"torch.save failed: {(str(e).splitlines() or [''])[0][:200]}") from e


def clear(directory: Path) -> None:
    """Remove the checkpoints (and temporary files a killed writer left) in `directory`, with the shards
    folders of data-parallel runs (zoo.backends.train.checkpoint_dcp): a fresh start must not later rotate an older
    run's checkpoint into state.prev.pt."""
    from zoo.backends.train import checkpoint_dcp

    if not directory.is_dir():
        return
    for p in [directory / FILE, directory / PREV, *directory.glob(f".{FILE}.tmp.*")]:
        with write_guard(p):
            p.unlink(missing_ok=True)
    for folder in checkpoint_dcp.folders(directory):
        checkpoint_dcp.remove(folder)


def shards_of(path: Path) -> str | None:
    """The shards folder the checkpoint file `path` names (a data-parallel run's), or None: no such file,
    a single-process checkpoint, or a file that cannot be read."""
    if not path.exists():
        return None
    try:
        return read(path).get("shards")
    except CheckpointError:
        return None


def shards_dropped_by_save(directory: Path) -> str | None:
    """The shards folder no checkpoint file names once the next `save` into `directory` is done: the
    one state.prev.pt names, when a state.pt exists to take its place (and names another folder);
    None otherwise (no state.pt: `save` leaves state.prev.pt as it is)."""
    current, prev = shards_of(directory / FILE), shards_of(directory / PREV)
    if not (directory / FILE).exists() or prev == current:
        return None
    return prev


def world_size_of(state: dict[str, Any]) -> int:
    """How many processes wrote `state` (checkpoints from before `world_size` was stored: one RNG
    state per rank)."""
    return int(state.get("world_size") or len(state.get("rng_ranks") or [None]))


def check_world_size(state: dict[str, Any], path: Path, world_size: int) -> None:
    """Refuse to resume `state` (read from `path`) under another number of processes: the prompts
    each rank drew, its RNG stream and (sharded) its shards belong to that world size. Raises
    CheckpointError naming both numbers and the command that resumes it."""
    n = world_size_of(state)
    if n == world_size:
        return
    how = "in one process (without torchrun)" if n == 1 else f"on {n} processes (torchrun --nproc_per_node {n} ...)"
    raise CheckpointError(
        f"{path}: written by a run on {n} process{'es' if n > 1 else ''}, this run has "
        f"{world_size}; resume it {how}, or start over with --fresh"
    )


def load(directory: Path) -> dict[str, Any] | None:
    """The saved state (directory/state.pt), or None when there is no checkpoint yet. Reads
    weights-only. When only state.prev.pt exists (a crash between the two renames of `save`, or the
    user moved a damaged state.pt away) it is loaded, with a warning. Raises CheckpointError."""
    path, prev = directory / FILE, directory / PREV
    if not path.exists():
        if not prev.exists():
            return None
        log.warning("%s is missing; resuming from the previous checkpoint %s", path, prev)
        try:
            return read(prev)
        except CheckpointError as e:
            raise CheckpointError(f"{e}; start over with --fresh") from None
    try:
        return read(path)
    except CheckpointError as e:
        raise CheckpointError(f"{e}; {_options(path, prev)}") from None


def read(path: Path) -> dict[str, Any]:
    """One checkpoint file, weights-only (tensors and plain values; nothing in it can run code).
    Raises CheckpointError naming the file: damaged (truncated, empty, not a checkpoint) or refused
    (it holds other objects, e.g. a pickle that would run code)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any other reader failure means the same: damaged file
        # the weights-only unpickler names the callable it would not import ("Unsupported global:
        # GLOBAL builtins.exec", "unsupported GLOBAL os.system whose module os is blocked")
        m = re.search(r"unsupported (?:global: )?GLOBAL ([\w.]+)", str(e), re.IGNORECASE)
        if isinstance(e, pickle.UnpicklingError) and m:
            raise CheckpointError(
                f"{path}: refused: it holds objects other than tensors and plain values ({m.group(1)}); zoo loads "
                "checkpoints weights-only, so a checkpoint cannot run code (was it written by another program?)"
            ) from None
        detail = (str(e).strip().splitlines() or [""])[0].split(". ")[0][:120]  # the first sentence
        if isinstance(e, pickle.UnpicklingError):
            detail = ""  # torch's advice to load with weights_only=False is not for a damaged file
        raise CheckpointError(
            f"{path}: damaged checkpoint, cannot be read ({type(e).__name__}" + (f": {detail}" if detail else "") + ")"
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CheckpointError(f"{path}: not a zoo checkpoint (no step)")
    return state


@contextmanager
def restoring(path: Path | str) -> Iterator[None]:
    """Loading a checkpoint read from `path` into models and optimizers: a missing key or a state
    that does not fit (KeyError, TypeError, ValueError, RuntimeError, IndexError) becomes one
    CheckpointError naming the file. Raises CheckpointError."""
    try:
        yield
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
        detail = (str(e).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(
            f"{path}: does not fit this run ({type(e).__name__}: {detail}); start over with --fresh"
        ) from None


def _options(path: Path, prev: Path) -> str:
    """What a user can do about a bad state.pt: resume from an intact previous file, or start over."""
    fresh = "start over with --fresh"
    if not prev.exists():
        return fresh
    try:
        step = read(prev)["step"]
    except CheckpointError:
        return f"the previous checkpoint {prev} is damaged too; {fresh}"
    return (
        f"the previous checkpoint {prev} (step {step}) is intact: move {path.name} away "
        f"(mv {path} {path}.bad) to resume from it, or {fresh}"
    )
