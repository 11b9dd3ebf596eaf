"""Autocast's weight cast, kept across forwards for frozen weights.

Under `torch.autocast(dtype=bf16)` every `nn.Linear` call casts its fp32 weight to bf16. Autocast
caches that cast only for leaf tensors that *require grad*, and only until the outermost autocast
context exits, so a frozen weight (a LoRA base, a full fine-tuning reference copy, a frozen critic
backbone) is cast again in every forward: in a decode step of SmolLM2-135M with LoRA that is 0.54 GB
read and 0.27 GB written per generated token (docs/results/performance-step.md, "The cheap step: before and after").

`cache_frozen_casts(model)` turns each `nn.Linear` of `model` into `FrozenCastLinear`, which under
autocast multiplies by a cached low-precision copy of its weight when that weight is frozen
(`requires_grad` False), fp32 and a plain tensor. The copy is rebuilt when the weight changes: its
key is (dtype, device, data pointer, `Tensor._version`), and every in-place write (an optimizer
step, `load_state_dict`, `copy_`) bumps `_version`. Results are bit-identical to autocast's own
cast (the same round-to-nearest-even `Tensor.to`, then the same bf16 kernel): autocast casts the
input and bias as before and leaves the already-bf16 weight alone. Outside autocast, for weights
that require grad (autocast caches those itself), and for DTensor (FSDP2) weights the layer is a
plain `nn.Linear`. The cost is memory: 2 bytes per frozen Linear weight element in bf16/fp16.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LOW = (torch.bfloat16, torch.float16)


class FrozenCastLinear(nn.Linear):
    """`nn.Linear` whose frozen fp32 weight is cast once per autocast dtype and weight version.

    x: [..., in_features] -> [..., out_features]; same values as `nn.Linear` under autocast."""

    _cast: Tensor | None = None
    _cast_key: tuple | None = None

    def __getstate__(self) -> dict:  # copies and pickles leave the cached copy behind (rebuilt on use)
        state = dict(super().__getstate__())
        state.pop("_cast", None)
        state.pop("_cast_key", None)
        return state

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        kind = x.device.type
        plain = (
            w.requires_grad  # autocast caches these itself
            or w.dtype != torch.float32
            or type(w) not in (nn.Parameter, Tensor)  # DTensor shards (FSDP2)
            or torch.compiler.is_compiling()  # data_ptr/_version would break the graph; inductor fuses the cast
            or not torch.is_autocast_enabled(kind)
        )
        dtype = None if plain else torch.get_autocast_dtype(kind)
        if dtype not in LOW:
            return super().forward(x)
        key = (dtype, w.device, w.data_ptr(), w._version)
        if self._cast_key != key:
            self._cast = None  # free the old copy before making the new one
            self._cast = w.detach().to(dtype)  # [out, in] low precision, as autocast would cast it
            self._cast_key = key
        return F.linear(x, self._cast, self.bias)  # autocast casts x and the bias, as for nn.Linear


def cache_frozen_casts(model: nn.Module) -> int:
    """Make every plain `nn.Linear` in `model` a `FrozenCastLinear` in place (class swap: parameters,
    state_dict keys, hooks and peft wrappers are unchanged). Idempotent. Returns how many layers were
    swapped. Do not call on FSDP2-sharded models (their weights are DTensors; the swap is skipped
    per call there, but a cached copy of an unsharded weight would defeat the sharding)."""
    n = 0
    for mod in model.modules():
        if type(mod) is nn.Linear:
            mod.__class__ = FrozenCastLinear
            n += 1
    return n
