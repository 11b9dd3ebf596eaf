"""Where the critic starts: `critic: {name: clipped_value, init: policy | reward_model}`.

- `policy` (default): the policy's base backbone + a zero head (zoo.models.critic.make_critic).
- `reward_model`: the reward model's backbone AND its scalar head (InstructGPT arXiv 2203.02155 §3.5:
  "we initialize the value function from the RM"), so V(s) starts as the RM's score of the prefix.
  The critic reads the policy's token ids, so the two must share a tokenizer (checked by
  zoo.checks.inputs, for `zoo validate` and `zoo run` alike). VAPO (arXiv 2504.05118 §4.1) reports that a critic initialised from a reward
  model starts biased (the RM scores a finished answer, the critic must value an unfinished prefix)
  and pretrains the value model instead: `budget.critic_warmup` (value pretraining) is that option,
  and the two combine.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.models.critic import ValueModel
from zoo.models.policy import apply_lora, enable_checkpointing

INITS = ("policy", "reward_model")


def critic_init(v: Any) -> str:
    """The variant's critic init ("policy" when there is no critic or it does not say)."""
    comp = v.slots.critic
    if comp is None:
        return "policy"
    return str(comp.get("init", "policy")) if isinstance(comp, dict) else "policy"


def reward_model_spec(rewards: list[Any]) -> dict[str, Any] | None:
    """The run's `reward_model` reward spec (a mapping), or None when it has none."""
    return next((dict(r) for r in rewards if isinstance(r, dict) and r.get("name") == "reward_model"), None)


def tokenizer_mismatch(policy_tok: Any, rm_tok: Any) -> str | None:
    """Why two tokenizers would not give the same ids for the same text (vocabulary or special ids
    differ), or None when they agree."""
    pv, rv = policy_tok.get_vocab(), rm_tok.get_vocab()
    if pv != rv:
        only = sorted(set(pv).symmetric_difference(rv))[:3]
        diff = f"e.g. {', '.join(map(repr, only))} in one only" if only else "the same tokens map to different ids"
        return f"vocabularies differ ({len(pv)} vs {len(rv)} tokens; {diff})"
    for k in ("eos_token_id", "bos_token_id"):
        if getattr(policy_tok, k, None) != getattr(rm_tok, k, None):
            return f"{k} differs ({getattr(policy_tok, k, None)} vs {getattr(rm_tok, k, None)})"
    return None


def critic_from_reward_model(
    model: str, *, dtype: torch.dtype, device: torch.device | str, lora: dict | None = None, checkpointing: bool = False
) -> ValueModel:
    """A `ValueModel` whose backbone and head are the reward model's (a fresh load in `dtype`, the
    policy's; the head stays float32). model: HF id or local directory of a one-label
    sequence-classification checkpoint. lora: as `make_critic` (fresh adapters on the backbone, base
    frozen, head trainable). The head's bias starts at the RM head's bias (0 where it has none).
    Raises ValueError as `zoo.rewards.reward_model.load_reward_model`."""
    from zoo.rewards.reward_model import load_reward_model, score_head

    rm, _ = load_reward_model(
        model, {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype], device
    )
    head: nn.Linear = score_head(rm)  # type: ignore[assignment]
    backbone = rm.base_model
    if checkpointing:
        enable_checkpointing(backbone)
    if lora is not None:
        backbone = apply_lora(backbone, lora, task_type=None)
    critic = ValueModel(backbone, rm.config.hidden_size).to(device)
    with torch.no_grad():
        critic.head.weight.copy_(head.weight.float())
        if head.bias is not None:
            critic.head.bias.copy_(head.bias.float())
    critic.train()
    return critic
