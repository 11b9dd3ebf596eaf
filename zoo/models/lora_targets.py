"""LoRA target modules checked against a model before peft wraps it: peft matches each
`target_modules` entry against a module's full name or its ending `.<entry>` and raises only when no
entry matches, so a list with one misspelt entry (`q_projj`) trains without that layer, silently."""

from __future__ import annotations

import difflib
from typing import Any, Sequence

#: peft's special value: every linear layer but the output head
ALL_LINEAR = "all-linear"


def adaptable_names(model: Any) -> list[str]:
    """The last name part of each layer of `model` LoRA can adapt (Linear, Conv1D, Embedding), sorted;
    a peft model's own `lora_*` and `base_layer` modules left out."""
    return sorted(
        {
            n.split(".")[-1]
            for n, m in model.named_modules()
            if n
            and (hasattr(m, "in_features") or type(m).__name__ in ("Conv1D", "Embedding"))
            and "lora_" not in n
            and not n.endswith("base_layer")
        }
    )


def unmatched_targets(model: Any, targets: Sequence[str]) -> list[str]:
    """One message per entry of `targets` (`model_opts.lora.target_modules`) that names no module of
    `model` (plain, meta-device or peft), with a close match and the layers LoRA can adapt; [] when
    every entry matches."""
    names = [n for n, _ in model.named_modules()]
    out = []
    for t in targets:
        if t == ALL_LINEAR or any(n == t or n.endswith("." + t) for n in names):
            continue
        layers = adaptable_names(model)
        close = difflib.get_close_matches(t, layers, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        out.append(
            f"model_opts.lora.target_modules: {t!r} names no module of the model{hint}, so LoRA would leave "
            f"it out; the layers LoRA can adapt: {', '.join(layers)}"
        )
    return out
