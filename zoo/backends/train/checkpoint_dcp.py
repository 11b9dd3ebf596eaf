"""Sharded checkpoints for data-parallel runs, through `torch.distributed.checkpoint` (DCP).

Every rank writes its own shard of the weights and optimizer states: `get_state_dict` /
`set_state_dict` (torch.distributed.checkpoint.state_dict) see plain modules, DDP and FSDP2
(`fully_shard`, DTensor shards) alike, and `dcp.save` / `dcp.load` move the tensors. Storage is
DCP's safetensors layout (`HuggingFaceStorageWriter(save_distributed=True)`: one
`shard-0000R-model-...safetensors` per rank, with each tensor's offsets in the file's JSON header),
read back by `HuggingFaceStorageReader`, so no pickle is read on resume: DCP's default
`FileSystemReader` unpickles its `.metadata` file and any non-tensor value. The few non-tensor values
(the optimizers' param groups: lr, betas, ...) go into the run's weights-only `state.pt` instead
(`split` / `merge`), so the whole checkpoint stays data (docs/reference/cli.md, Trust).

Folders: `checkpoint/shards.stepN/`, written as `checkpoint/.shards.stepN.tmp/` and renamed when every
rank has written; `state.pt` names the folder it belongs to, so a crash at any point leaves the previous
pair (state.pt + its folder) intact. A folder is never reused: a name already taken gets a suffix.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as td

from zoo.core.faults import WriteError, write_error, write_guard

log = logging.getLogger(__name__)

PREFIX = "shards.step"
# a part: (module, its optimizer or None, whether frozen parameters are kept)
Part = tuple[torch.nn.Module, "torch.optim.Optimizer | None", bool]


def state_dicts(parts: dict[str, Part]) -> dict[str, dict[str, Any]]:
    """{name: model state, name + "/optimizer": flat optimizer state} of each part, as DCP sees them
    (DTensor shards under FSDP2, `module.` prefixes of DDP removed). Frozen parameters (a LoRA base) are
    left out unless the part keeps them. Collective under FSDP2: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    out: dict[str, dict[str, Any]] = {}
    for name, (model, optim, keep_frozen) in parts.items():
        opts = StateDictOptions(ignore_frozen_params=not keep_frozen, flatten_optimizer_state_dict=True)
        msd, osd = get_state_dict(model, [optim] if optim is not None else [], options=opts)
        out[name] = msd
        if optim is not None:
            out[name + "/optimizer"] = osd
    return out


def split(sd: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, dict[str, Any]]]:
    """(tensors, everything else) of `state_dicts`' output, keyed the same way two levels deep."""
    tensors = {k: {n: v for n, v in d.items() if isinstance(v, torch.Tensor)} for k, d in sd.items()}
    plain = {k: {n: v for n, v in d.items() if not isinstance(v, torch.Tensor)} for k, d in sd.items()}
    return tensors, plain


def merge(tensors: dict[str, dict[str, Any]], plain: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Inverse of `split`."""
    return {k: {**tensors.get(k, {}), **plain.get(k, {})} for k in {*tensors, *plain}}


def folder_name(directory: Path, step: int) -> str:
    """`shards.stepN`, or `shards.stepN.K` when that name is taken (a crash left it, or a resume from
    state.prev.pt reaches the step again): a finished folder is never overwritten."""
    name, k = f"{PREFIX}{step}", 1
    while (directory / name).exists():
        name, k = f"{PREFIX}{step}.{k}", k + 1
    return name


def _broadcast(obj: Any) -> Any:
    box = [obj]
    td.broadcast_object_list(box, src=0)
    return box[0]


def save_sharded(directory: Path, step: int, parts: dict[str, Part]) -> tuple[str, dict[str, dict[str, Any]]]:
    """Every rank writes its shards of `parts` into `directory/shards.stepN/` (see the module doc).
    Collective: every rank calls it. Returns (the folder's name, the non-tensor values to keep in
    state.pt; the same on every rank). Raises WriteError (zoo.core.faults) naming the folder, on every rank
    (DCP gathers each rank's failure); the temporary folder is removed."""
    from torch.distributed.checkpoint import HuggingFaceStorageWriter, save
    from torch.distributed.checkpoint.api import CheckpointException

    tensors, plain = split(state_dicts(parts))
    name = _broadcast(folder_name(directory, step) if td.get_rank() == 0 else None)
    tmp = directory / f".{name}.tmp"
    if td.get_rank() == 0:
        with write_guard(tmp):
            shutil.rmtree(tmp, ignore_errors=True)  # a killed writer's leftovers: never a finished folder
            tmp.mkdir(parents=True)
    td.barrier()
    try:
        save(tensors, storage_writer=HuggingFaceStorageWriter(str(tmp), save_distributed=True))
    except CheckpointException as e:  # a BaseException holding every rank's failure
        if td.get_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # partial shards would keep a full disk full
        raise _as_write_error(e, directory / name) from None
    td.barrier()  # every rank's shard is on disk
    if td.get_rank() == 0:
        with write_guard(directory / name):
            os.replace(tmp, directory / name)
    td.barrier()
    return name, plain


def _as_write_error(e: BaseException, path: Path) -> WriteError:
    """DCP's CheckpointException as one WriteError: the first rank's OSError (disk full, read-only)
    with its reason, else the first failure's first line."""
    failures = [f[0] if isinstance(f, tuple) else f for f in getattr(e, "failures", {}).values()]
    for f in failures:
        if isinstance(f, OSError):
            return write_error(f, path)
    first = failures[0] if failures else e
    return WriteError(
        f"could not write {path} ({type(first).__name__}: {(str(first).strip().splitlines() or [''])[0][:200]})",
        filename=str(path),
    )


def load_sharded(folder: Path, plain: dict[str, dict[str, Any]], parts: dict[str, Part]) -> None:
    """Load what `save_sharded` wrote into `folder` (and the `plain` values it returned) back into
    `parts`, each rank reading its own shards. Collective. Raises FileNotFoundError for a missing
    folder, and DCP's CheckpointException / RuntimeError for shards that do not fit (the caller names the
    checkpoint: zoo.backends.train.checkpoint.restoring)."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader, load
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    if not folder.is_dir():
        raise FileNotFoundError(f"the shards folder {folder} that state.pt names is missing")
    current = state_dicts(parts)
    tensors, _ = split(current)
    load(tensors, storage_reader=HuggingFaceStorageReader(str(folder)))
    sd = merge(tensors, plain)
    for name, (model, optim, keep_frozen) in parts.items():
        opts = StateDictOptions(
            ignore_frozen_params=not keep_frozen, flatten_optimizer_state_dict=True, strict=keep_frozen
        )
        set_state_dict(
            model,
            [optim] if optim is not None else [],
            model_state_dict=sd[name],
            optim_state_dict=sd.get(name + "/optimizer", {}),
            options=opts,
        )


def read_full(folder: Path, part: str) -> dict[str, torch.Tensor]:
    """The whole tensors of one part (e.g. "policy") of a shards folder, in one process and without a
    process group: each rank's chunks (safetensors files, offsets from their JSON headers) put
    together. {fqn: tensor} with the model's own parameter names (as `state_dicts` gave them).
    Raises FileNotFoundError for a missing or empty folder."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"{folder}: no shards (*.safetensors) in it")
    chunks: dict[str, list[tuple[list[int], torch.Tensor]]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as s:
            info = json.loads((s.metadata() or {}).get("DCP_SHARDING_INFO", "{}"))
            for key in s.keys():
                if key.startswith(part + "."):
                    t = s.get_tensor(key)
                    offsets = info.get(key, {}).get("saved_offsets") or [0] * t.dim()
                    chunks.setdefault(key[len(part) + 1 :], []).append((offsets, t))
    out = {}
    for name, parts in chunks.items():
        size = [max(o[d] + t.shape[d] for o, t in parts) for d in range(parts[0][1].dim())]
        whole = torch.empty(size, dtype=parts[0][1].dtype)
        for o, t in parts:
            whole[tuple(slice(a, a + n) for a, n in zip(o, t.shape))] = t
        out[name] = whole
    return out


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor shard (collective: every rank calls it), a plain tensor as it is."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def folders(directory: Path) -> list[Path]:
    """The shards folders (finished and temporary) in `directory`."""
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if p.is_dir() and p.name.lstrip(".").startswith(PREFIX)]


def remove(folder: Path) -> None:
    """Delete one shards folder (one no checkpoint file refers to any more)."""
    with write_guard(folder):
        shutil.rmtree(folder)
