"""Whether a Hugging Face Hub id can be read here, decided in about a second instead of transformers'
~30 s of retries: in the local HF cache, the Hub reachable (a TCP connection to `HF_ENDPOINT`), or
offline (`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`).

    hub_error("Qwen/Qwen2.5-0.5B-Instruct", "teacher.model")
    # "teacher.model: 'Qwen/Qwen2.5-0.5B-Instruct' is a Hugging Face Hub id that is not in the local
    #  HF cache (/root/.cache/huggingface/hub), and the Hub (huggingface.co) cannot be reached from
    #  here: give a local model directory, or download it first ..."

`load_kwargs(name, ...)`: `local_files_only=True` for a Hub id when offline or the Hub is unreachable
(`read_cache_only`), so a cached model loads at once rather than after the retries.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

_HUB_ID = re.compile(r"[\w.\-]+/[\w.\-]+")
_TRUE = ("1", "ON", "YES", "TRUE")
_REACHABLE: dict[str, bool] = {}  # endpoint -> reachable, probed once per process


def offline() -> bool:
    """Whether HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set (huggingface_hub's truthy values)."""
    return any(os.environ.get(k, "").upper() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def endpoint() -> str:
    """The Hub's URL (`HF_ENDPOINT`, default https://huggingface.co)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub's host opens within `timeout` seconds (once per process)."""
    url = endpoint()
    if url not in _REACHABLE:
        u = urlparse(url)
        try:
            socket.create_connection((u.hostname or "", u.port or (80 if u.scheme == "http" else 443)), timeout).close()
            _REACHABLE[url] = True
        except OSError:
            _REACHABLE[url] = False
    return _REACHABLE[url]


def read_cache_only() -> bool:
    """Whether model files should come from the local cache only: offline, or the Hub unreachable."""
    return offline() or not reachable()


def load_kwargs(*names: str) -> dict[str, bool]:
    """`from_pretrained` keywords for loading `names`: local_files_only when one is a Hub id and
    `read_cache_only()` (the Hub is not probed for local directories)."""
    return {"local_files_only": True} if any(is_hub_id(n) for n in names) and read_cache_only() else {}


def is_hub_id(name: str) -> bool:
    """`owner/name` that is not a local directory (what `zoo.models.sources.resolve_model` reads from the Hub)."""
    name = str(name).strip()
    return bool(_HUB_ID.fullmatch(name)) and not Path(name).expanduser().is_dir()


def cached(repo_id: str) -> bool:
    """Whether the HF cache holds `repo_id`'s config.json or tokenizer_config.json."""
    from huggingface_hub import try_to_load_from_cache

    return any(isinstance(try_to_load_from_cache(repo_id, f), str) for f in ("config.json", "tokenizer_config.json"))


def hub_error(name: str, key: str) -> str | None:
    """One line saying why Hub id `name` (under run-file key `key`) cannot load here: not in the local
    HF cache and offline or the Hub unreachable. None for a local path, a cached id, or a reachable Hub."""
    if not is_hub_id(name) or cached(name):
        return None
    if offline():
        why = "HF_HUB_OFFLINE is set, so only the local cache is read"
    elif not reachable():
        why = f"the Hub ({urlparse(endpoint()).hostname}) cannot be reached from here"
    else:
        return None
    from huggingface_hub import constants

    return (
        f"{key}: {name!r} is a Hugging Face Hub id that is not in the local HF cache ({constants.HF_HUB_CACHE}), "
        f"and {why}: give a local model directory, or download it first where the Hub is reachable "
        f"(huggingface-cli download {name}) and copy the cache here"
    )
