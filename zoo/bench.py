"""`zoo bench`: what one training step costs, phase by phase, and how it compares.

    res = run_bench(BenchSpec(variant="grpo", prompts=8, group_size=4, max_new_tokens=64, steps=3))
    res["phases"]["train"]["seconds"], res["train_flops"]["flops_per_s"], res["memory"]["peak_mb"]

One bench = `zoo.trainer.setup` + one warm-up `zoo.step.pipeline.step` + `steps` measured ones (no checkpoints,
evaluation or tracking). Per phase it reports the median seconds, the tokens the phase handled,
tokens/s and the phase's peak memory:

    generate   sampling the completions          tokens = completion tokens generated (to EOS)
    forward    old/reference log-probs, values   tokens = positions through the model (prompt+completion)
    score      rewards, length shaping, filters  tokens = completion tokens scored
    advantage  KL-in-reward, estimator, normaliser
    train      every optimizer step of the rollout (forward + backward + AdamW), critic included
    critic     the critic's share of `train` (forward + backward; PPO-style variants only)

Seconds come from the trainer's own `time/*` metrics; memory and token counts from light wrappers
around the phase functions (installed only for the bench, removed afterwards). Peak memory per phase
is exact: on Linux freed heap pages are handed back (`malloc_trim`) and the kernel's resident-set
high-water mark is reset at each phase start (`/proc/self/clear_refs` <- 5) and read at its end
(VmHWM); on a GPU it is
`torch.cuda.reset_peak_memory_stats` / `max_memory_allocated`. Where the high-water mark cannot be
reset the numbers are the process peak so far (`memory.peak_resettable` false).

Train-phase FLOP/s estimate: 6 x params x tokens / seconds, params = the policy's parameters (+ 6 x
the critic's x its positions with a critic), tokens = prompt + completion positions through the
training forward/backward as run (padding inside a trimmed micro-batch included: it is computed).

`tokens` of forward/train/critic = positions the models actually ran (forward pre-hooks on policy,
reference and critic count `input_ids`); with prompt sharing
(`zoo.rollout.token_logprobs(share_prompts=True)`) a group's prompt counts once, not G times;
`real_tokens` = the non-padding prompt + completion tokens of the rows (what a forward without
sharing or padding would run). Each step also records CPU seconds (all threads) and the 1-minute
load average, so runs disturbed by other jobs show.

Memory breakdown (`memory`): weights (every parameter and buffer of policy, reference copy and
critic), gradients (trainable parameters), optimizer state (the AdamW tensors actually allocated),
runtime (resident memory of the process before the models loaded: Python, torch, tokenizer, task)
and activations = measured peak - all of those (activations, logits, KV cache, allocator slack).

Comparisons (`compare_memory`, `scan`, `vs_trl`) run each configuration in its own subprocess
(`python -m zoo.bench SPEC.json OUT.json`, `python -m zoo.bench_trl ...`) so that every number is
that process's own peak. Set `ZOO_BENCH_LOCK=/path/to/lockfile` to run each worker under
`flock` (serialises benchmark workers with other heavy jobs on a shared machine).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from zoo.provenance import peak_memory_mb, reset_peak_memory

PHASES = ("generate", "forward", "score", "advantage", "train", "critic")
#: the task of experiments/quickstart.yaml: 2-term +/- arithmetic, 1-2 digits, worked 2-shot prompts
BENCH_TASK: dict[str, Any] = {
    "name": "reasoning_gym", "dataset": "basic_arithmetic",
    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, "operators": ["+", "-"],
               "allow_negation": False, "allow_parentheses": False},
    "size": 512, "eval_size": 4, "fewshot": 2,
    "fewshot_answer": "{expression} = {answer}. The answer is \\boxed{{answer}}.",
}
BENCH_REWARDS: list[Any] = ["correctness", {"name": "format", "weight": 0.5}]
#: LoRA of experiments/quickstart.yaml
BENCH_LORA = {"r": 16, "alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
#: zoo's side of `--vs trl` (TRL GRPOTrainer: loss_type "dapo", scale_rewards "group", epsilon 0.2,
#: beta 0, num_iterations 1): a registry variant, so `zoo show` / `zoo diff grpo trl_grpo_matched` show it.
TRL_MATCHED_VARIANT = "trl_grpo_matched"
SCAN_KEYS = ("group_size", "max_new_tokens", "prompts", "micro_batch")


@dataclass
class BenchSpec:
    """One benchmark configuration (JSON-serialisable: workers receive it as a file)."""

    variant: str = "grpo"
    model: str = "smollm2-135m-instruct-q4"
    prompts: int = 8
    group_size: int = 4
    max_new_tokens: int = 64
    steps: int = 3
    warmup: int = 1
    lora: bool = False
    checkpointing: bool = False  # activation (gradient) checkpointing
    ignore_eos: bool = False  # every completion runs to max_new_tokens
    autocast: str = "none"
    micro_batch: int = 8
    updates: str | None = None  # "EPOCHSxMINIBATCHES"; None: the variant's own
    sets: dict[str, Any] = field(default_factory=dict)  # slot overrides, as `zoo run --set set.X=...`
    seed: int = 0
    threads: int | None = None
    lr: float = 1e-5
    task: dict[str, Any] = field(default_factory=lambda: dict(BENCH_TASK))
    rewards: list[Any] = field(default_factory=lambda: list(BENCH_REWARDS))

    def label(self) -> str:
        return (f"{self.variant} {'lora' if self.lora else 'full'} {self.autocast}"
                + (" checkpointing" if self.checkpointing else ""))


def parse_updates(text: str | None) -> dict[str, int] | None:
    """"1x1" -> {"epochs": 1, "minibatches": 1}; None -> None. Raises ValueError."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not m:
        raise ValueError(f"--updates {text!r}: expected EPOCHSxMINIBATCHES, e.g. 1x1")
    return {"epochs": int(m.group(1)), "minibatches": int(m.group(2))}


def resolve_bench_autocast(setting: str) -> tuple[str, str]:
    """`zoo.precision.resolve_autocast` for the device a bench runs on (CUDA if available, else CPU):
    (choice, reason). The spec then carries the concrete choice, so TRL's side and the recorded JSON
    match zoo's. Raises ValueError for an unknown setting."""
    import torch

    from zoo.precision import resolve_autocast

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return resolve_autocast(setting, device)


def run_config(spec: BenchSpec, out_dir: str | os.PathLike):
    """The RunConfig a bench trains with (warm-up + measured steps; no eval, no tracking)."""
    from zoo.config.run import RunConfig

    data: dict[str, Any] = {
        "name": f"bench-{spec.variant}",
        "variant": spec.variant,
        "set": dict(spec.sets),
        "model": spec.model,
        "model_opts": {"autocast": spec.autocast, "lora": dict(BENCH_LORA) if spec.lora else None,
                       "gradient_checkpointing": spec.checkpointing},
        "task": dict(spec.task),
        "rewards": list(spec.rewards),
        "budget": {"steps": spec.warmup + spec.steps, "prompts_per_step": spec.prompts,
                   "group_size": spec.group_size, "max_new_tokens": spec.max_new_tokens,
                   "micro_batch": spec.micro_batch},
        "optim": {"lr": spec.lr},
        "sampling": {"ignore_eos": bool(spec.ignore_eos)},
        "eval": {"enabled": False},
        "tracking": {"wandb": False},
        "seed": spec.seed,
        "output_dir": str(out_dir),
    }
    upd = parse_updates(spec.updates)
    if upd is not None:
        data["budget"]["updates"] = upd
    return RunConfig.model_validate(data)


# --------------------------------------------------------------------------- memory probes


def _proc_status_kb(key: str) -> float | None:
    try:
        m = re.search(rf"^{key}:\s+(\d+)\s+kB", Path("/proc/self/status").read_text(), re.M)
    except OSError:
        return None
    return float(m.group(1)) if m else None


def rss_mb() -> float:
    """Current resident set size (MB); the peak so far where /proc is unavailable."""
    kb = _proc_status_kb("VmRSS")
    return kb / 1024 if kb is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_mb(device) -> float:
    import torch

    return torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else rss_mb()


def _tensor_mb(tensors: Iterator[Any]) -> float:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if t is None or t.device.type == "meta":
            continue
        key = t.data_ptr()
        if key in seen or t.numel() == 0:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total / 2**20


def memory_breakdown(st: Any, runtime_mb: float, peak_mb: float) -> dict[str, float]:
    """weights / gradients / optimizer / runtime from the run's tensors, activations = the rest."""
    models = [st.models.policy]
    ref = st.reference
    if ref is not None and not ref.shares_policy:
        models.append(ref.model)
    if st.models.critic is not None:
        models.append(st.models.critic)

    def all_tensors():
        for m in models:
            yield from m.parameters()
            yield from m.buffers()

    weights = _tensor_mb(all_tensors())
    trainable = [p for m in models for p in m.parameters() if p.requires_grad]
    grads = sum(p.numel() * p.element_size() for p in trainable) / 2**20
    opt_tensors = []
    for opt in (st.optimizer, st.critic_optimizer):
        if opt is None:
            continue
        for s in opt.state.values():
            opt_tensors += [v for v in s.values() if hasattr(v, "data_ptr")]
    optimizer = _tensor_mb(iter(opt_tensors))
    acts = peak_mb - runtime_mb - weights - grads - optimizer
    return {"peak_mb": peak_mb, "runtime_mb": runtime_mb, "weights_mb": weights, "gradients_mb": grads,
            "optimizer_mb": optimizer, "activations_mb": acts}


# --------------------------------------------------------------------------- phase probe


class _Probe:
    """Wraps the step's phase functions: per-phase peak memory, token counts and critic time."""

    def __init__(self, st: Any):
        self.st = st
        self.device = st.device
        self.phase: str | None = None
        self.resettable = True
        self.rec: dict[str, dict[str, float]] = {}
        self._crit_t0: float | None = None
        self.in_critic = False
        self._crit_last_grad = 0.0

    def _add(self, phase: str, **kv: float) -> None:
        r = self.rec.setdefault(phase, {"seconds": 0.0, "tokens": 0.0, "peak_mb": 0.0})
        for k, v in kv.items():
            r[k] = max(r.get(k, 0.0), v) if k == "peak_mb" else r.get(k, 0.0) + v

    def phase_fn(self, phase: str, fn: Callable, tokens: Callable[[Any, tuple, dict], float] | None = None):
        def wrapped(*a, **kw):
            outer = self.phase
            self.phase = phase
            self.resettable &= reset_peak_memory(self.device)
            t0 = time.perf_counter()
            try:
                out = fn(*a, **kw)
            finally:
                self.phase = outer
            dt = time.perf_counter() - t0
            self._add(phase, seconds=dt, peak_mb=peak_memory_mb(self.device),
                      tokens=float(tokens(out, a, kw)) if tokens else 0.0)
            if phase == "train":
                self._close_critic()
            return out

        wrapped.__wrapped__ = fn  # type: ignore[attr-defined]
        return wrapped

    def counting_fn(self, fn: Callable, critic: bool = False):
        """forward_logp / critic_values: count the rows' real tokens (the positions a forward runs
        are counted by `position_hook`); time the critic's forward inside the train phase."""
        def wrapped(model, mb, s, *a, **kw):
            real = float(mb.prompt_mask.sum() + mb.loss_mask.sum())  # not padding, not past EOS
            if critic and self.phase == "train":
                self._close_critic()
                self.in_critic = True
                t0 = time.perf_counter()
                try:
                    out = fn(model, mb, s, *a, **kw)
                finally:
                    self.in_critic = False
                self._add("critic", seconds=time.perf_counter() - t0, real_tokens=real)
                return out
            if self.phase is not None:
                self._add(self.phase, real_tokens=real)
            return fn(model, mb, s, *a, **kw)

        return wrapped

    def position_hook(self, module, args, kwargs) -> None:
        """Forward pre-hook on policy / reference / critic: positions run in forward and train."""
        if self.phase not in ("forward", "train"):
            return  # generation's decode steps are counted as generated tokens instead
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            self._add("critic" if self.in_critic else self.phase, tokens=float(ids.numel()))

    # critic backward: from the critic loss's return to the last critic gradient accumulated
    def critic_loss(self, comp: Any):
        probe = self

        class _Timed:
            def __getattr__(self, k):
                return getattr(comp, k)

            def __call__(self, *a, **kw):
                out = comp(*a, **kw)
                probe._close_critic()
                probe._crit_t0 = time.perf_counter()
                return out

        return _Timed()

    def _grad_hook(self, _p) -> None:
        self._crit_last_grad = time.perf_counter()

    def _close_critic(self) -> None:
        if self._crit_t0 is not None and self._crit_last_grad > self._crit_t0:
            self._add("critic", seconds=self._crit_last_grad - self._crit_t0)
        self._crit_t0 = None

    def pop(self) -> dict[str, dict[str, float]]:
        rec, self.rec = self.rec, {}
        return rec


@contextlib.contextmanager
def instrument(st: Any) -> Iterator[_Probe]:
    """Install the probe's wrappers around the trainer's phase functions (restored on exit)."""
    from zoo.step import forwards, pipeline, sample, update

    probe = _Probe(st)
    gen_tokens = lambda out, a, kw: float(out.lengths.sum())  # noqa: E731
    score_tokens = lambda out, a, kw: float(a[0].loss_mask.sum()) if a and hasattr(a[0], "loss_mask") else 0.0  # noqa: E731
    logp_counter = probe.counting_fn(forwards.forward_logp)
    value_counter = probe.counting_fn(forwards.critic_values, critic=True)
    patches = [  # where each stage's function is looked up (the module that calls it)
        (sample, "generate_rollout", probe.phase_fn("generate", sample.generate_rollout, gen_tokens)),
        (sample, "compute_rewards", probe.phase_fn("score", sample.compute_rewards)),
        (sample, "length_shaping", probe.phase_fn("score", sample.length_shaping)),
        (sample, "objective_scores", probe.phase_fn("score", sample.objective_scores, score_tokens)),
        (pipeline, "rollout_forwards", probe.phase_fn("forward", pipeline.rollout_forwards)),
        (pipeline, "kl_reward", probe.phase_fn("advantage", pipeline.kl_reward)),
        (pipeline, "advantage", probe.phase_fn("advantage", pipeline.advantage, score_tokens)),
        (pipeline, "normalize", probe.phase_fn("advantage", pipeline.normalize)),
        (pipeline, "update", probe.phase_fn("train", pipeline.update)),
        (forwards, "forward_logp", logp_counter),
        (update, "forward_logp", logp_counter),
        (forwards, "critic_values", value_counter),
        (update, "critic_values", value_counter),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    hooks = []
    modules = [st.models.policy, st.models.critic]
    if st.reference is not None and not st.reference.shares_policy:
        modules.append(st.reference.model)
    hooks += [m.register_forward_pre_hook(probe.position_hook, with_kwargs=True) for m in modules if m is not None]
    crit_comp = st.slots.critic
    if st.models.critic is not None and crit_comp is not None:
        st.slots.critic = probe.critic_loss(crit_comp)
        hooks += [p.register_post_accumulate_grad_hook(probe._grad_hook)
                  for p in st.models.critic.parameters() if p.requires_grad]
    try:
        for mod, name, fn in patches:
            setattr(mod, name, fn)
        yield probe
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        st.slots.critic = crit_comp
        for h in hooks:
            h.remove()


# --------------------------------------------------------------------------- one bench


def cpu_seconds() -> float:
    """User + system CPU time of this process so far (all threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _median(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return float(statistics.median(xs)) if xs else float("nan")


def machine_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    try:
        cpu = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", cpu, re.M)
        info["cpu"] = m.group(1).strip() if m else platform.processor()
        flags = re.search(r"^flags\s*:\s*(.+)$", cpu, re.M)
        info["avx512_bf16"] = bool(flags and "avx512_bf16" in flags.group(1).split())
        mem = re.search(r"^MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text(), re.M)
        info["mem_total_gb"] = round(int(mem.group(1)) / 2**20, 1) if mem else None
        info["loadavg_1m"] = os.getloadavg()[0]
    except OSError:
        info["cpu"] = platform.processor()
    return info


def versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for p in ("variant-zoo", "torch", "transformers", "accelerate", "peft", "trl"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def run_bench(spec: BenchSpec, *, on_step: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Set up one run, take `spec.warmup` + `spec.steps` steps, summarise the measured ones."""
    import torch

    from zoo import trainer
    from zoo.step import pipeline

    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    runtime = current_mb(device)
    with tempfile.TemporaryDirectory(prefix="zoo-bench-") as tmp:
        t0 = time.perf_counter()
        st = trainer.setup(run_config(spec, tmp), device=device)
        setup_s = time.perf_counter() - t0
        steps: list[dict[str, Any]] = []
        with instrument(st) as probe:
            for i in range(spec.warmup + spec.steps):
                c0, l0 = cpu_seconds(), _loadavg()
                m = pipeline.step(st)
                rec = probe.pop()
                if i < spec.warmup:
                    continue
                row = {p: dict(rec.get(p, {"seconds": 0.0, "tokens": 0.0, "peak_mb": 0.0})) for p in PHASES}
                for p, key in (("generate", "time/generate"), ("score", "time/score"), ("forward", "time/forward"),
                               ("advantage", "time/advantage"), ("train", "time/train")):
                    if key in m:  # the trainer's own timers are the reference for seconds
                        row[p]["seconds"] = float(m[key])
                row["step"] = {"seconds": float(m["time/step"]), "cpu_s": cpu_seconds() - c0,
                               "loadavg_1m": max(l0, _loadavg()),
                               "peak_mb": max(r["peak_mb"] for p, r in row.items() if p in PHASES),
                               "tokens": float(rec.get("generate", {}).get("tokens", 0.0))}
                row["metrics"] = {k: float(m[k]) for k in ("reward/total", "accuracy", "completion/len_mean",
                                                           "loss/policy", "groups/rounds") if k in m}
                steps.append(row)
                if on_step:
                    on_step(i - spec.warmup + 1, row)
        res = summarize(spec, steps)
        res["setup_s"] = setup_s
        res["memory"] = memory_breakdown(st, runtime, res["step"]["peak_mb"])
        res["memory"]["peak_resettable"] = probe.resettable
        from zoo.models import count_parameters

        res["parameters"] = {"policy": count_parameters(st.models.policy),
                             "critic": count_parameters(st.models.critic) if st.models.critic is not None else None,
                             "reference_copy": bool(st.reference is not None and not st.reference.shares_policy)}
        pol = res["parameters"]["policy"]["total"]
        crit = res["parameters"]["critic"]["total"] if res["parameters"]["critic"] else 0
        res["train_flops"] = train_flops(pol, res["phases"]["train"]["tokens"], res["phases"]["train"]["seconds"],
                                         crit, res["phases"].get("critic", {}).get("tokens", 0.0))
        res["device"] = str(device)
        del st
    return res


def train_flops(params: float, tokens: float, seconds: float, critic_params: float = 0.0,
                critic_tokens: float = 0.0) -> dict[str, float]:
    """Achieved FLOP/s estimate of the train phase: 6 x params x tokens / seconds (forward 2, backward
    4 FLOPs per parameter and position), plus 6 x critic params x critic positions with a critic."""
    flops = 6.0 * params * tokens + 6.0 * critic_params * critic_tokens
    return {"params": float(params), "tokens": float(tokens), "critic_params": float(critic_params),
            "critic_tokens": float(critic_tokens), "seconds": float(seconds), "flops": flops,
            "flops_per_s": flops / seconds if seconds > 0 else float("nan")}


def summarize(spec: BenchSpec, steps: list[dict[str, Any]]) -> dict[str, Any]:
    phases = {}
    has_critic = any(s["critic"]["seconds"] > 0 or s["critic"]["tokens"] > 0 for s in steps)
    for p in PHASES:
        if p == "critic" and not has_critic:
            continue  # no critic in this variant
        sec = _median([s[p]["seconds"] for s in steps])
        tok = _median([s[p]["tokens"] for s in steps])
        phases[p] = {"seconds": sec, "tokens": tok, "tokens_per_s": tok / sec if sec > 0 and tok > 0 else 0.0,
                     "real_tokens": _median([s[p].get("real_tokens", s[p]["tokens"]) for s in steps]),
                     "peak_mb": max((s["train" if p == "critic" else p]["peak_mb"] for s in steps),
                                    default=float("nan"))}  # the critic's peak is the train phase's
    step = {"seconds": _median([s["step"]["seconds"] for s in steps]),
            "cpu_s": _median([s["step"].get("cpu_s", float("nan")) for s in steps]),
            "loadavg_1m": max((s["step"].get("loadavg_1m", float("nan")) for s in steps), default=float("nan")),
            "peak_mb": max((s["step"]["peak_mb"] for s in steps), default=float("nan")),
            "tokens": _median([s["step"]["tokens"] for s in steps])}
    step["tokens_per_s"] = step["tokens"] / step["seconds"] if step["seconds"] > 0 else 0.0
    metrics = {k: _median([s["metrics"].get(k, float("nan")) for s in steps])
               for k in ("reward/total", "accuracy", "completion/len_mean", "groups/rounds")}
    return {"spec": asdict(spec), "phases": phases, "step": step, "metrics": metrics,
            "steps": steps, "machine": machine_info(), "versions": versions()}


# --------------------------------------------------------------------------- subprocess workers


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1"),
                 ("WANDB_MODE", "disabled"), ("TOKENIZERS_PARALLELISM", "false")):
        env.setdefault(k, v)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_worker(module: str, spec: dict[str, Any], *, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run `python -m <module> SPEC.json OUT.json` in a fresh process; returns OUT's JSON."""
    with tempfile.TemporaryDirectory(prefix="zoo-bench-w-") as tmp:
        sp, op = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        sp.write_text(json.dumps(spec))
        cmd = [sys.executable, "-m", module, str(sp), str(op)]
        lock = os.environ.get("ZOO_BENCH_LOCK")
        if lock:
            cmd = ["flock", lock] + cmd
        if log:
            log(f"worker: {module} {spec.get('label', '')}")
        proc = subprocess.run(cmd, env=_worker_env(), capture_output=True, text=True)
        if proc.returncode != 0 or not op.exists():
            tail = (proc.stderr or "")[-4000:]
            raise RuntimeError(f"benchmark worker {module} failed (exit {proc.returncode}):\n{tail}")
        return json.loads(op.read_text())


def _bench_worker(spec_d: dict[str, Any]) -> dict[str, Any]:
    spec_d = {k: v for k, v in spec_d.items() if k in BenchSpec.__dataclass_fields__}
    return run_bench(BenchSpec(**spec_d))


def bench_in_subprocess(spec: BenchSpec, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    d = asdict(spec)
    d["label"] = spec.label()
    return run_worker("zoo.bench", d, log=log)


# --------------------------------------------------------------------------- comparisons


def compare_memory(base: BenchSpec, variants: Sequence[str], modes: Sequence[bool] = (False, True),
                   log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Each variant x (full, LoRA) in its own process, on the same model and batch; `ratio_to_first`
    is each variant's peak memory over the first variant's (the baseline named first)."""
    rows = []
    for lora in modes:
        for v in variants:
            spec = replace(base, variant=v, lora=lora)
            r = bench_in_subprocess(spec, log=log)
            rows.append({"variant": v, "mode": "lora" if lora else "full", "step_s": r["step"]["seconds"],
                         **r["memory"], "phases": {p: v["seconds"] for p, v in r["phases"].items()},
                         "parameters": r["parameters"], "result": r})
    ratios = {}
    first = variants[0] if variants else None
    for mode in ("full", "lora"):
        by = {r["variant"]: r for r in rows if r["mode"] == mode}
        if first in by:
            ratios[mode] = {v: by[v]["peak_mb"] / by[first]["peak_mb"] for v in by}
    return {"rows": rows, "baseline": first, "ratio_to_first": ratios, "spec": asdict(base)}


def parse_scan(text: str) -> tuple[str, list[int]]:
    """"group_size=2,4,8" -> ("group_size", [2, 4, 8]). Raises ValueError."""
    if "=" not in text:
        raise ValueError(f"--scan {text!r}: expected KEY=V1,V2,... with KEY one of {', '.join(SCAN_KEYS)}")
    key, vals = text.split("=", 1)
    key = key.strip().replace("-", "_")
    if key not in SCAN_KEYS:
        raise ValueError(f"--scan: unknown key {key!r}; use one of {', '.join(SCAN_KEYS)}")
    try:
        values = [int(v) for v in vals.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--scan {text!r}: values must be integers") from None
    if not values or min(values) < 1:
        raise ValueError(f"--scan {text!r}: give positive integer values")
    return key, values


def scan(base: BenchSpec, key: str, values: Sequence[int], log: Callable[[str], None] | None = None,
         in_process: bool = False) -> dict[str, Any]:
    """One bench per value of `key` (each in its own process unless `in_process`)."""
    points = []
    for v in values:
        spec = replace(base, **{key: v})
        r = run_bench(spec) if in_process else bench_in_subprocess(spec, log=log)
        points.append({"value": v, "step_s": r["step"]["seconds"], "peak_mb": r["step"]["peak_mb"],
                       "phases": {p: v["seconds"] for p, v in r["phases"].items()},
                       "gen_tokens": r["phases"]["generate"]["tokens"], "train_tokens": r["phases"]["train"]["tokens"],
                       "len_mean": r["metrics"].get("completion/len_mean"), "memory": r["memory"]})
    return {"key": key, "points": points, "spec": asdict(base)}


def plot_scan(res: dict[str, Any], path: str | os.PathLike) -> Path:
    """Stacked per-phase step time and peak memory against the scanned value (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = res["points"]
    xs = [p["value"] for p in pts]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    bottom = [0.0] * len(xs)
    for ph in ("generate", "forward", "score", "advantage", "train"):
        ys = [p["phases"][ph] for p in pts]
        a1.bar([str(x) for x in xs], ys, bottom=bottom, label=ph)
        bottom = [b + y for b, y in zip(bottom, ys)]
    a1.plot([str(x) for x in xs], [p["step_s"] for p in pts], "k.-", label="step")
    a1.set_xlabel(res["key"])
    a1.set_ylabel("seconds per step (median)")
    a1.legend(fontsize=8)
    a2.plot(xs, [p["peak_mb"] / 1024 for p in pts], "o-", label="peak")
    a2.plot(xs, [(p["memory"]["peak_mb"] - p["memory"]["activations_mb"]) / 1024 for p in pts], "s--",
            label="runtime+weights+grads+optimizer")
    a2.set_ylim(bottom=0)
    a2.set_xscale("log", base=2)
    a2.set_xticks(xs, [str(x) for x in xs])
    a2.set_xlabel(res["key"])
    a2.set_ylabel("GiB")
    a2.legend(fontsize=8)
    s = res["spec"]
    fixed = {"prompts": f"prompts {s['prompts']}", "group_size": f"G {s['group_size']}",
             "max_new_tokens": f"max new tokens {s['max_new_tokens']}", "micro_batch": f"micro-batch {s['micro_batch']}"}
    fixed.pop(res["key"], None)
    fig.suptitle(f"{s['variant']} ({'LoRA' if s['lora'] else 'full'}, autocast {s['autocast']}): {res['key']} scan, "
                 + ", ".join(fixed.values()) + (", EOS ignored" if s.get("ignore_eos") else "")
                 + f"; median of {s['steps']} steps", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def vs_trl(base: BenchSpec, rounds: int = 2, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """zoo (TRL-matched GRPO) and TRL's GRPOTrainer, alternating A B / B A over `rounds`,
    each run in its own process (own peak memory)."""
    from zoo.bench.trl import trl_spec

    spec = replace(base, variant=TRL_MATCHED_VARIANT, updates="1x1")
    zoo_d = asdict(spec) | {"label": "zoo"}
    trl_d = trl_spec(spec) | {"label": "trl"}
    out: dict[str, list[dict[str, Any]]] = {"zoo": [], "trl": []}
    for r in range(rounds):
        order = ("zoo", "trl") if r % 2 == 0 else ("trl", "zoo")
        for side in order:
            if side == "zoo":
                res = run_worker("zoo.bench", zoo_d, log=log)
                out["zoo"].append({"step_times": [s["step"]["seconds"] for s in res["steps"]],
                                   "cpu_s": [s["step"]["cpu_s"] for s in res["steps"]],
                                   "loadavg_1m": res["step"]["loadavg_1m"],
                                   "peak_mb": res["step"]["peak_mb"], "len_mean": res["metrics"]["completion/len_mean"],
                                   "reward": res["metrics"]["reward/total"],
                                   "phases": {p: v["seconds"] for p, v in res["phases"].items()}})
            else:
                out["trl"].append(run_worker("zoo.bench_trl", trl_d, log=log))
    summary = {}
    for side in ("zoo", "trl"):
        times = [t for r in out[side] for t in r["step_times"]]
        summary[side] = {"step_s": _median(times), "step_times": times,
                         "cpu_s": _median([c for r in out[side] for c in r["cpu_s"]]),
                         "loadavg_1m": max(r["loadavg_1m"] for r in out[side]),
                         "peak_mb": max(r["peak_mb"] for r in out[side]),
                         "len_mean": _median([r.get("len_mean", float("nan")) for r in out[side]]),
                         "reward": _median([r.get("reward", float("nan")) for r in out[side]])}
    ratio = {"step_time": summary["zoo"]["step_s"] / summary["trl"]["step_s"],
             "peak_mem": summary["zoo"]["peak_mb"] / summary["trl"]["peak_mb"]}
    return {"zoo": summary["zoo"], "trl": summary["trl"], "ratio": ratio, "rounds": out,
            "spec": asdict(spec), "trl_config": trl_d, "machine": machine_info(), "versions": versions()}


def _main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    res = _bench_worker(spec)
    Path(argv[1]).write_text(json.dumps(res, default=str))
    return 0


if __name__ == "__main__":
    import torch  # noqa: F401  (fail early in the worker, not in the parent)

    sys.exit(_main(sys.argv[1:]))
