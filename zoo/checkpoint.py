"""Checkpoints a restart resumes from: one file, written atomically (tmp file + rename).

Holds the policy's trainable weights (the LoRA adapter, or the full state dict), the critic, every
optimizer and scheduler, the RNG states (python, numpy, torch, CUDA), the data-stream position, the
step, the adaptive KL beta, a moved reference (only after `ref_reset_every` moved it) and the W&B
run id. The reference is otherwise *not* saved: it is the initial policy, rebuilt from the model
source on resume (docs/algorithms.md conventions).
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zoo.models import is_peft

FILE = "state.pt"


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
        raise RuntimeError(f"checkpoint does not match the model: missing {sorted(trainable & set(missing))[:5]}, "
                           f"unexpected {sorted(unexpected)[:5]}")


def rng_state() -> dict[str, Any]:
    out = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(directory: Path, state: dict[str, Any]) -> Path:
    """Write `state` to directory/state.pt atomically; a crash mid-write leaves the previous file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILE
    tmp = directory / f".{FILE}.tmp.{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load(directory: Path) -> dict[str, Any] | None:
    """The saved state, or None when there is no checkpoint yet."""
    path = directory / FILE
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
