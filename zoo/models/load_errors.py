"""One-line errors for a model that transformers could not load, saying what to do instead."""

from __future__ import annotations

import os


def model_load_error(name: str, path: str, kind: str, e: Exception, *, embedded: str) -> ValueError:
    """A ValueError for transformers' OSError / ValueError `e` while loading model `name` from `path`.

    kind: "hub" (a Hub id: offline, unreachable or no such model -> use a local directory, the
    `embedded` model, or go online) or "local"/"embedded" (a directory without model files)."""
    first = str(e).strip().splitlines()[0].rstrip(".:") if str(e).strip() else type(e).__name__
    if kind == "hub":
        why = (
            "HF_HUB_OFFLINE is set, so only the local HF cache is read"
            if os.environ.get("HF_HUB_OFFLINE")
            else "the Hub could not be reached or has no such model"
        )
        return ValueError(
            f"model {name!r}: could not load it from the Hugging Face Hub ({why}): {first}. Use a "
            f"local model directory (model: /path/to/model), the embedded model (model: {embedded}), "
            "or go online (unset HF_HUB_OFFLINE) to download it"
        )
    return ValueError(
        f"model {name!r} ({path}): transformers could not load it: {first}. A model directory needs "
        "config.json, the weights and the tokenizer files (as save_pretrained writes them)"
    )
