"""A trained policy as a plain Hugging Face checkpoint (LoRA merged into a copy)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from torch import nn

from zoo.models.policy import is_peft
from zoo.models.reference import REFERENCE_ADAPTER


def save_hf_checkpoint(model: nn.Module, tokenizer: Any, out_dir: str | os.PathLike) -> Path:
    """Write a plain HF checkpoint (safetensors + config + tokenizer) that
    `AutoModelForCausalLM.from_pretrained(out_dir)` loads without peft.

    LoRA: the active adapter is merged into the base weights of a *copy* (`merge_and_unload`); the
    training model is left as it is. Returns the output directory.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if is_peft(model):
        merged = copy.deepcopy(model)
        if REFERENCE_ADAPTER in merged.peft_config:
            merged.delete_adapter(REFERENCE_ADAPTER)
        merged = merged.merge_and_unload()
    else:
        merged = model
    merged.save_pretrained(out, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out
