"""The policy's parameter count, from a meta-device model built from its config.json (no weights,
no memory): a note, so `zoo validate` says how large the model it checked is."""

from __future__ import annotations

from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import AfterLoad


def meta_model(config: Any) -> Any:
    """`AutoModelForCausalLM.from_config(config)` on the meta device (shapes only), or None when
    transformers cannot build it from the config."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, OSError, ImportError):
        return None


_COUNTS: dict[str, tuple[int, str] | None] = {}  # config.json text -> (parameters, class): one build per model


def meta_count(config: Any) -> tuple[int, str] | None:
    """(parameter count, model class) of the model `config` describes, from a meta-device build
    (cached per config); None when transformers cannot build it."""
    key = config.to_json_string()
    if key not in _COUNTS:
        model = meta_model(config)
        _COUNTS[key] = None if model is None else (sum(p.numel() for p in model.parameters()), type(model).__name__)
    return _COUNTS[key]


@check("parameter_count", "after_load")
def parameter_count(s: AfterLoad, rep: Report) -> None:
    """A note: the parameters of the loaded model, else of a meta-device model built from the config
    (cached per config: a study's arms on one model build it once)."""
    if s.model is not None:
        counted: tuple[int, str] | None = (sum(p.numel() for p in s.model.parameters()), type(s.model).__name__)
    else:
        counted = meta_count(s.model_config)
    if counted is None:
        return
    n, name = counted
    rep.notes.append(
        f"model: {n / 1e6:.1f}M parameters ({name}, {s.cfg.model_opts.dtype} weights "
        f"{n * {'float32': 4}.get(s.cfg.model_opts.dtype, 2) / 1e9:.2f} GB)"
    )
