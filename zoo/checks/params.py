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


@check("parameter_count", "after_load")
def parameter_count(s: AfterLoad, rep: Report) -> None:
    if s.model is None:
        s.model = meta_model(s.model_config)
    if s.model is None:
        return
    n = sum(p.numel() for p in s.model.parameters())
    rep.notes.append(f"model: {n / 1e6:.1f}M parameters ({type(s.model).__name__}, "
                     f"{s.cfg.model_opts.dtype} weights {n * {'float32': 4}.get(s.cfg.model_opts.dtype, 2) / 1e9:.2f} GB)")
