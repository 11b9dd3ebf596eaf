"""The reference policy (the KL anchor; docs/concepts/algorithms.md "Our conventions": the initial policy).

`make_reference(policy, lora_enabled=...)` returns a `Reference`. Always run reference forwards as

    with reference_forward(ref) as ref_model:
        ref_logp, _ = token_logprobs(ref_model, ...)

With LoRA the reference is the policy itself with its adapters disabled (peft `disable_adapter()`;
no second copy of the base weights). Without LoRA it is a frozen deep copy in eval mode.
`reset_reference(ref, policy)` makes the current policy the new reference (DeepSeekMath Alg. 1,
arXiv 2402.03300): a weight copy for full fine-tuning; for LoRA a frozen copy of the current
adapter weights is kept as a second adapter ("zoo_reference") that reference forwards switch to.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch import nn

from zoo.models.policy import is_peft

REFERENCE_ADAPTER = "zoo_reference"


@dataclass
class Reference:
    """The KL reference policy.

    model: the frozen copy (full fine-tuning), or the policy itself (LoRA: shares_policy=True).
    shares_policy: reference forwards run the policy with its adapters disabled, or with the
        frozen `REFERENCE_ADAPTER` after `reset_reference`.
    adapter: None (base weights are the reference) or REFERENCE_ADAPTER.
    resets: how many times `reset_reference` moved it.
    """

    model: nn.Module
    shares_policy: bool
    adapter: str | None = None
    resets: int = field(default=0)


def make_reference(policy: nn.Module, *, lora_enabled: bool | None = None) -> Reference:
    """The reference policy = the policy as it is now (call this before any update).

    lora_enabled: True -> share the policy, adapters disabled during reference forwards (the
        reference is the base model; LoRA B matrices start at 0, so that is the initial policy).
        False -> frozen deep copy (eval mode, requires_grad False). None -> True iff `policy` is a
        peft model.
    Raises ValueError if lora_enabled=True but `policy` is not a peft model.
    """
    if lora_enabled is None:
        lora_enabled = is_peft(policy)
    if lora_enabled:
        if not is_peft(policy):
            raise ValueError("lora_enabled=True but the policy is not a peft model")
        return Reference(model=policy, shares_policy=True)
    ref = copy.deepcopy(policy).eval()
    ref.requires_grad_(False)
    return Reference(model=ref, shares_policy=False)


@contextmanager
def reference_forward(ref: Reference) -> Iterator[nn.Module]:
    """Context in which the yielded module computes the *reference* policy.

    Inside: torch.no_grad, eval mode; for a shared LoRA policy the adapters are disabled (or the
    frozen reference adapter is active after `reset_reference`). On exit the policy's train/eval
    mode and active adapter are restored. Do not step an optimizer inside this context.

        with reference_forward(ref) as m:
            ref_logp, _ = token_logprobs(m, input_ids, attention_mask, T)   # [N, T]
    """
    model = ref.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if not ref.shares_policy:
                yield model
            elif ref.adapter is None:
                with model.disable_adapter():
                    yield model
            else:
                active = model.active_adapter
                model.set_adapter(ref.adapter, inference_mode=True)
                try:
                    yield model
                finally:
                    model.set_adapter(active)  # re-enables grads on the trained adapter
    finally:
        model.train(was_training)


def reset_reference(ref: Reference, policy: nn.Module) -> Reference:
    """Make the current policy the new reference (DeepSeekMath Alg. 1, arXiv 2402.03300 §4.2).

    Full fine-tuning: copies the policy's weights into the frozen copy (no new allocation).
    LoRA (shared policy): copies the current trained adapter's weights into a frozen second adapter
    `REFERENCE_ADAPTER` (created on first reset; same LoraConfig), which `reference_forward`
    activates. Base weights are never touched or merged. Returns `ref` (mutated).
    Raises ValueError when `ref` shares a different model than `policy`.
    """
    if not ref.shares_policy:
        ref.model.load_state_dict(policy.state_dict())
        ref.model.requires_grad_(False)
    else:
        if ref.model is not policy:
            raise ValueError("this LoRA reference belongs to a different policy")
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        active = policy.active_adapter
        if REFERENCE_ADAPTER not in policy.peft_config:
            policy.add_adapter(REFERENCE_ADAPTER, copy.deepcopy(policy.peft_config[active]))
        weights = get_peft_model_state_dict(policy, adapter_name=active)
        with torch.no_grad():
            set_peft_model_state_dict(policy, weights, adapter_name=REFERENCE_ADAPTER)
        policy.set_adapter(active)  # keeps the trained adapter active and trainable
        for name, p in policy.named_parameters():
            if f".{REFERENCE_ADAPTER}." in name:
                p.requires_grad_(False)
        ref.adapter = REFERENCE_ADAPTER
    ref.resets += 1
    return ref
