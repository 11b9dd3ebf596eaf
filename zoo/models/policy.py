"""The policy: loading a causal LM and its tokenizer, LoRA adapters, activation checkpointing."""

from __future__ import annotations

import torch
from torch import nn

from zoo.models.forward import contiguous_head_input
from zoo.models.load_errors import model_load_error
from zoo.models.sources import EMBEDDED_MODEL, ModelSource, resolve_model

_LORA_KEYS = {"r", "alpha", "target_modules", "dropout", "bias", "modules_to_save"}
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def _as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}") from None


def lora_config(lora: dict, *, task_type: str | None = "CAUSAL_LM"):
    """peft `LoraConfig` from a plain dict.

    Keys: r (int, required), alpha (default 2*r), target_modules (default ["q_proj", "v_proj"]),
    dropout (default 0.0), bias (default "none"), modules_to_save (default None).
    Raises ValueError on unknown keys or r < 1.
    """
    from peft import LoraConfig

    unknown = set(lora) - _LORA_KEYS
    if unknown:
        raise ValueError(f"unknown LoRA keys {sorted(unknown)}; allowed: {sorted(_LORA_KEYS)}")
    r = int(lora.get("r", 0))
    if r < 1:
        raise ValueError(f"LoRA needs r >= 1, got {lora.get('r')!r}")
    return LoraConfig(
        r=r,
        lora_alpha=lora.get("alpha", 2 * r),
        target_modules=list(lora.get("target_modules", ["q_proj", "v_proj"])),
        lora_dropout=float(lora.get("dropout", 0.0)),
        bias=lora.get("bias", "none"),
        modules_to_save=lora.get("modules_to_save"),
        task_type=task_type,
    )


def prepare_tokenizer(tokenizer):
    """Left padding and a pad token (eos when the tokenizer has none). Returns the tokenizer."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(
    source_or_name: ModelSource | str,
    *,
    dtype: str | torch.dtype = "float32",
    lora: dict | None = None,
    gradient_checkpointing: bool = False,
    device: str | torch.device | None = None,
):
    """Load the policy model and its tokenizer.

    source_or_name: a `ModelSource` or anything `resolve_model` accepts.
    dtype: "float32" | "bfloat16" | "float16" (or a torch.dtype) for the weights.
    lora: None for full fine-tuning, else a dict for `lora_config` ({"r": 16, "alpha": 32,
        "target_modules": [...]}) -> a peft `PeftModelForCausalLM` with only adapters trainable.
    gradient_checkpointing: non-reentrant checkpointing (works with frozen LoRA bases); sets
        `config.use_cache=False` (generation in eval mode is unaffected).
    device: move the model there (default: stay on CPU / where from_pretrained put it).

    A checkpoint whose config has a `vision_config` loads as `AutoModelForImageTextToText` (its processor:
    `zoo.models.vlm.load_processor`).
    Returns (model in train mode, tokenizer with padding_side='left' and a pad token).
    Raises what `resolve_model` / `lora_config` raise; ValueError (`model_load_error`) when transformers
    cannot load it (a Hub id while offline, a directory without model files).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from zoo.models.vlm import is_image_text

    src = source_or_name if isinstance(source_or_name, ModelSource) else resolve_model(source_or_name)
    torch_dtype = _as_dtype(dtype)
    try:
        tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(src.path))
        image_text = is_image_text(AutoConfig.from_pretrained(src.path))  # a VLM: `zoo.models.vlm`
        auto = AutoModelForImageTextToText if image_text else AutoModelForCausalLM
        model = auto.from_pretrained(src.path, dtype=torch_dtype)
    except (OSError, ValueError) as e:  # transformers: not on the Hub / offline / not a model directory
        raise model_load_error(src.name, src.path, src.kind, e, embedded=EMBEDDED_MODEL) from None
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    contiguous_head_input(model)  # logits_to_keep's sliced hidden states: a plain matmul, not a batched one
    if device is not None:
        model.to(device)
    if gradient_checkpointing:
        enable_checkpointing(model)
        model.config.use_cache = False
    if lora is not None:
        model = apply_lora(model, lora)
    model.train()
    return model, tokenizer


def enable_checkpointing(model: nn.Module) -> None:
    """Non-reentrant activation checkpointing (transformers 5 name, with the 4.x fallback)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # transformers < 5
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def is_checkpointing(model: nn.Module) -> bool:
    """Whether activation checkpointing is on (transformers' `is_activation_checkpointing`, or the
    older `is_gradient_checkpointing`, read without its deprecation warning where possible)."""
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))


def apply_lora(model: nn.Module, lora: dict, *, task_type: str | None = "CAUSAL_LM"):
    """Wrap `model` with fresh LoRA adapters (peft `get_peft_model`); base weights frozen.
    Raises ValueError (`zoo.models.lora_targets.unmatched_targets`) when a `target_modules` entry names
    no module of `model`."""
    import warnings

    from peft import get_peft_model

    from zoo.models.lora_targets import unmatched_targets

    errors = unmatched_targets(model, list(lora.get("target_modules", ["q_proj", "v_proj"])))
    if errors:
        raise ValueError("\n".join(errors))

    with warnings.catch_warnings():  # peft reads transformers' deprecated `is_gradient_checkpointing`
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, lora_config(lora, task_type=task_type))


def is_peft(model: nn.Module) -> bool:
    """Whether `model` is a peft model (False when peft is not installed)."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(model, PeftModel)


def count_parameters(model: nn.Module) -> dict[str, int]:
    """{"total": n, "trainable": n} counting each tensor once (tied embeddings are one tensor)."""
    params = list(model.parameters())  # parameters() yields a shared (tied) tensor once
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    return {"total": total, "trainable": trainable}
