"""`model:` names something loadable: a local path that exists and holds a checkpoint's
config.json (the embedded model, an `arms:` model and Hub ids are resolved when the model loads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


def local_path(name: Any) -> Path | None:
    """The local directory `name` means (an existing directory, or a path-like name: starts with '/',
    '.', '~' or has several '/'), else None (the embedded model, `arms:`, a Hub id)."""
    from zoo.models.sources import ARMS_PREFIX, EMBEDDED_ALIASES

    m = str(name).strip()
    if not m or m in EMBEDDED_ALIASES or m.startswith(ARMS_PREFIX):
        return None
    p = Path(m).expanduser()
    if p.is_dir() or m.startswith((".", "/", "~")) or m.count("/") > 1:
        return p
    return None


def model_dir_error(name: Any, key: str) -> str | None:
    """Why local model `name` (under `key`, e.g. `model`) cannot load: it does not exist, is not a
    directory, or holds no config.json. None when it is no local path or looks loadable."""
    p = local_path(name)
    if p is None:
        return None
    if not p.exists():
        return f"{key}: local path {str(name)!r} does not exist"
    if not p.is_dir():
        return f"{key}: local path {str(name)!r} is not a directory; give the folder save_pretrained wrote"
    if not (p / "config.json").is_file():
        return (
            f"{key}: local path {str(name)!r} has no config.json; a model directory holds config.json, the "
            "weights and the tokenizer files (as save_pretrained writes them)"
        )
    return None


@check("model_path", "before_load")
def model_path(s: BeforeLoad, rep: Report) -> None:
    """The policy's `model:` (a local path must exist and hold config.json)."""
    err = model_dir_error(s.cfg.model, "model")
    if err:
        rep.errors.append(err)


@check("lora_targets", "before_load")
def lora_targets(s: BeforeLoad, rep: Report) -> None:
    """`model_opts.lora.target_modules` names at least one module, each a non-empty name (PEFT would
    refuse an empty list only after the model loaded)."""
    lora = getattr(s.cfg.model_opts, "lora", None)
    if lora is None:
        return
    targets = list(lora.target_modules)
    if not targets or not all(isinstance(t, str) and t.strip() for t in targets):
        rep.errors.append(
            f"model_opts.lora.target_modules: {targets!r} names no module; list the linear layers LoRA adapts, "
            "e.g. [q_proj, v_proj] (the default), or remove model_opts.lora to train every weight"
        )
