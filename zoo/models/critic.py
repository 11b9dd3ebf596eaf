"""The critic: `make_critic(policy, lora=None)` -> `ValueModel`, a copy of the policy's *base*
backbone (LoRA adapters excluded) + a fresh scalar head (zero-initialised by default, so V = 0 at
step 0)."""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from zoo.models.forward import own_positions, position_ids_from_mask
from zoo.models.policy import apply_lora, enable_checkpointing, is_checkpointing, is_peft


def _base_causal_lm(policy: nn.Module) -> nn.Module:
    return policy.get_base_model() if is_peft(policy) else policy


def _base_backbone_state(policy: nn.Module) -> dict[str, Tensor]:
    """State dict of the decoder backbone with LoRA layers stripped (base weights only)."""
    lm = _base_causal_lm(policy)
    prefix = lm.base_model_prefix  # "model" for Llama/Qwen/...
    state = {}
    for k, v in getattr(lm, prefix).state_dict().items():
        if "lora_" in k or ".modules_to_save." in k:
            continue
        state[k.replace(".base_layer.", ".")] = v
    return state


class ValueModel(nn.Module):
    """Critic: a decoder backbone (no LM head) + a scalar head.

    forward(input_ids [B, L], attention_mask [B, L], position_ids [B, L] or None) -> values [B, L]
    float32: the value of the state ending at each position (V(s_t) for completion token t is the
    value at the position *before* it; `completion_values` does that slicing).
    """

    def __init__(self, backbone: nn.Module, hidden_size: int, head_std: float = 0.0):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.head.bias)
        if head_std > 0:
            nn.init.normal_(self.head.weight, std=head_std)
        else:
            nn.init.zeros_(self.head.weight)

    def hidden_states(
        self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor | None = None, **media: Tensor
    ) -> Tensor:
        """Last hidden states [B, L, H] (position ids from the mask when None, C10; none at all for a
        backbone that computes its own from the images in `media`, Qwen2-VL's M-RoPE). media: an image task's
        processor outputs for these rows (`zoo.core.media.media_inputs`), passed to the backbone."""
        if position_ids is None and not ("pixel_values" in media and own_positions(self.backbone)):
            position_ids = position_ids_from_mask(attention_mask)
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **media
        )
        return out.last_hidden_state  # [B, L, H]

    def _head(self, h: Tensor) -> Tensor:
        with torch.autocast(device_type=h.device.type, enabled=False):
            return self.head(h.float()).squeeze(-1)  # [..., L]

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor | None = None, **media: Tensor
    ) -> Tensor:
        return self._head(self.hidden_states(input_ids, attention_mask, position_ids, **media))  # [B, L]

    def completion_values(self, input_ids: Tensor, attention_mask: Tensor, n_completion: int) -> Tensor:
        """Values V(s_t) [B, T] for the last T = n_completion tokens: the head on positions L-T-1 ..
        L-2 (the state before each completion token). Raises ValueError if T >= L or T < 1."""
        L = input_ids.shape[1]
        if not 1 <= n_completion < L:
            raise ValueError(f"n_completion={n_completion} must be in [1, {L - 1}]")
        h = self.hidden_states(input_ids, attention_mask)[:, L - n_completion - 1 : L - 1]  # [B, T, H]
        return self._head(h)  # [B, T]


def make_critic(policy: nn.Module, lora: dict | None = None, *, head_std: float = 0.0) -> ValueModel:
    """Critic initialised from the policy's BASE weights (docs/concepts/algorithms.md conventions).

    policy: the causal LM (plain or peft-wrapped; LoRA adapters are not copied).
    lora: None -> the whole backbone is trainable; a dict (as `lora_config`) -> fresh LoRA adapters
        on the backbone, base frozen; the head is always trainable.
    head_std: 0 -> zero-initialised head (V = 0 everywhere at start); > 0 -> normal(0, head_std).
    The critic has the policy's dtype and device; its head is float32.
    """
    from transformers import AutoModel

    lm = _base_causal_lm(policy)
    ref_param = next(lm.parameters())
    config = copy.deepcopy(lm.config)
    backbone = AutoModel.from_config(config, dtype=ref_param.dtype)
    backbone.load_state_dict(_base_backbone_state(policy))
    backbone.to(ref_param.device)
    if is_checkpointing(lm):
        enable_checkpointing(backbone)
    if lora is not None:
        backbone = apply_lora(backbone, lora, task_type=None)
    hidden = getattr(config, "hidden_size", None) or config.get_text_config().hidden_size  # a VLM: its text model's
    critic = ValueModel(backbone, hidden, head_std=head_std).to(ref_param.device)
    critic.train()
    return critic
