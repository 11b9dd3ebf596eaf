"""The weight-transfer contract between the trainer and a sampler that holds its own copy of the weights
(the `vllm` generator today; rollout workers in other processes later).

The contract's types live in zoo/core/kinds.py with the other kinds' contracts (re-exported here). A policy
version is `PolicyVersion(version, tensors)`: an increasing integer and the named tensors of the policy
in the BASE model's names (transformers' `model.layers.0.self_attn.q_proj.weight`, ...). A receiver
(`WeightReceiver.accept`) loads them and from then on samples with them; it must not assume it runs in
the trainer's process: the tensors are plain CPU or device tensors, no module is shared.

LoRA is merged on the fly: each adapted Linear is sent as `W + scaling * B @ A` under the base layer's
name (PEFT's `base_model.model.` prefix and `.base_layer` infix stripped, the `lora_*` tensors
themselves skipped), so the receiver needs no adapter support and the trainer's module is not touched
(no merge/unmerge round trip on its weights).
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor, nn

from zoo.core.kinds import PolicyVersion, WeightReceiver

__all__ = ["PEFT_PREFIX", "PolicyVersion", "WeightReceiver", "base_name", "named_weights", "policy_version"]

PEFT_PREFIX = "base_model.model."


def base_name(peft_name: str) -> str | None:
    """A PEFT parameter name -> the base model's name, or None for an adapter tensor (`lora_A`, `lora_B`,
    `lora_embedding_*`, `lora_magnitude_vector`). Names without the PEFT prefix are returned unchanged.

    `base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight` -> `model.layers.0.self_attn.q_proj.weight`.
    """
    parts = peft_name.split(".")
    if any(p.startswith("lora_") for p in parts):
        return None
    name = peft_name[len(PEFT_PREFIX) :] if peft_name.startswith(PEFT_PREFIX) else peft_name
    return name.replace(".base_layer.", ".").removesuffix(".base_layer")


def _unwrap(policy: nn.Module) -> nn.Module:
    """The module under DistributedDataParallel (`.module`); FSDP2 modules are left as they are."""
    return getattr(policy, "module", policy) if type(policy).__name__ == "DistributedDataParallel" else policy


def _full(t: Tensor) -> Tensor:
    """A DTensor (FSDP2) gathered to its full tensor; a plain tensor as it is. Detached."""
    full = getattr(t, "full_tensor", None)
    return (full() if callable(full) else t).detach()


def _merged_lora(module: nn.Module) -> Tensor | None:
    """For a PEFT LoRA layer: its base weight plus the active adapters' deltas (PEFT's own
    `get_delta_weight`: scaling * B @ A, fan_in_fan_out handled); None for other modules."""
    base = getattr(module, "base_layer", None)
    if base is None or not hasattr(module, "get_delta_weight") or not hasattr(module, "lora_A"):
        return None
    w = _full(base.weight)
    if getattr(module, "merged", False):  # already merged into the base layer by the user
        return w
    for name in getattr(module, "active_adapters", []):
        if name in module.lora_A and not getattr(module, "disable_adapters", False):
            w = w + module.get_delta_weight(name).detach().to(w.dtype)
    return w


def named_weights(policy: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """The policy's weights in base-model names, one tensor at a time (a DTensor is gathered when it is
    reached, so an FSDP2 model is never held twice in full): parameters and persistent buffers; LoRA
    layers merged (`base_name`). Tensors keep their dtype and device."""
    model = _unwrap(policy)
    merged: dict[str, Tensor] = {}
    with torch.no_grad():
        for mname, mod in model.named_modules():
            w = _merged_lora(mod)
            if w is not None:
                merged[f"{mname}.base_layer.weight"] = w
        seen: set[int] = set()
        for name, t in model.state_dict(keep_vars=True).items():
            key = base_name(name)
            if key is None:
                continue
            if name in merged:
                yield key, merged.pop(name)
                continue
            if id(t) in seen and key == "lm_head.weight":  # tied embeddings: the receiver ties them itself
                continue
            seen.add(id(t))
            yield key, _full(t)


def policy_version(policy: nn.Module, version: int) -> PolicyVersion:
    """`PolicyVersion(version, named_weights(policy))` materialised (for a receiver in another process,
    or a test). The in-process sync streams `named_weights` instead."""
    return PolicyVersion(int(version), tuple(named_weights(policy)))
