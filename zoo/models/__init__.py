"""Policy, reference, critic (value model), LoRA and the embedded default model, one module a job:

    sources.py    resolve_model -> ModelSource; the embedded GGUF's one-time conversion and its cache
    policy.py     load_policy, prepare_tokenizer, LoRA (lora_config, apply_lora), checkpointing
    reference.py  Reference: make_reference, reference_forward, reset_reference (the KL anchor)
    critic.py     ValueModel, make_critic (the policy's base backbone + a scalar head)
    cast_cache.py cache_frozen_casts: autocast's bf16 weight cast kept across forwards for frozen weights
    export.py     save_hf_checkpoint (a plain HF checkpoint, LoRA merged into a copy)
    forward.py    how a causal LM is called: position ids from the mask (C10), logits_to_keep, KV caches
    load_errors.py  one-line errors for a model transformers could not load
    chatml.py     the ChatML special tokens, template and character tokenizer of the small models zoo builds
    arms.py       the `arms:` bandit model, built in code
    dual_encoder.py  the `dual_encoder` policy source of `zoo tta`: a CLIP-style model built in code (issue 32 §3)
    dual_rollout.py  its rollout: K class candidates per image, their log-probs, the entropy
    dual_cache.py    the pre-trained dual encoder, built once and cached under zoo's cache root
    tiny.py       tiny random models for the tests (no module of zoo imports it; not re-exported here)

`critic: {init: reward_model}` (the reward model's backbone and head) is zoo.rewards.critic_init.

The public names of the first five are re-exported here (`from zoo.models import load_policy`).
"""

from zoo.models.cast_cache import cache_frozen_casts
from zoo.models.critic import ValueModel, make_critic
from zoo.models.export import save_hf_checkpoint
from zoo.models.policy import (
    apply_lora,
    count_parameters,
    enable_checkpointing,
    is_checkpointing,
    is_peft,
    load_policy,
    lora_config,
    prepare_tokenizer,
)
from zoo.models.reference import REFERENCE_ADAPTER, Reference, make_reference, reference_forward, reset_reference
from zoo.models.sources import (
    EMBEDDED_ALIASES,
    EMBEDDED_DIST,
    EMBEDDED_GGUF,
    EMBEDDED_MODEL,
    EMBEDDED_PACKAGE,
    ModelSource,
    cache_root,
    find_embedded_gguf,
    resolve_model,
    weights_hash,
)

__all__ = [
    "EMBEDDED_ALIASES",
    "EMBEDDED_DIST",
    "EMBEDDED_GGUF",
    "EMBEDDED_MODEL",
    "EMBEDDED_PACKAGE",
    "REFERENCE_ADAPTER",
    "ModelSource",
    "Reference",
    "ValueModel",
    "apply_lora",
    "cache_frozen_casts",
    "cache_root",
    "count_parameters",
    "enable_checkpointing",
    "find_embedded_gguf",
    "is_checkpointing",
    "is_peft",
    "load_policy",
    "lora_config",
    "make_critic",
    "make_reference",
    "prepare_tokenizer",
    "reference_forward",
    "reset_reference",
    "resolve_model",
    "save_hf_checkpoint",
    "weights_hash",
]
