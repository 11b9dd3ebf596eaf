"""One bench: `zoo.run.trainer.setup`, `spec.warmup` unmeasured steps, then `spec.steps` measured ones
(`zoo.step.pipeline.step` with the probe as its hooks; no checkpoints, evaluation or tracking),
summarised per phase (zoo/bench/__init__.py says what each number means)."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

from zoo.bench.decode import measure_decode
from zoo.bench.machine import cpu_seconds, loadavg_1m, machine_info, median, versions
from zoo.bench.memory import current_mb, memory_breakdown
from zoo.bench.probe import attach
from zoo.bench.spec import BenchSpec, run_config
from zoo.run.rollouts import close_rollouts, open_rollouts
from zoo.step.hooks import PHASES


def run_bench(spec: BenchSpec, *, on_step: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Set up one run, take `spec.warmup` + `spec.steps` steps, summarise the measured ones."""
    import torch

    from zoo.run import trainer
    from zoo.step import pipeline

    if spec.threads:
        torch.set_num_threads(spec.threads)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    runtime = current_mb(device)
    with tempfile.TemporaryDirectory(prefix="zoo-bench-") as tmp:
        t0 = time.perf_counter()
        st = trainer.setup(run_config(spec, tmp), device=device)
        open_rollouts(st)  # an async bench's workers (nothing for the synchronous step)
        setup_s = time.perf_counter() - t0
        steps: list[dict[str, Any]] = []
        with attach(st) as probe, _closing(st):
            for i in range(spec.warmup + spec.steps):
                c0, l0, w0 = cpu_seconds(), loadavg_1m(), time.perf_counter()
                m = pipeline.step(st, hooks=probe).metrics
                wall = time.perf_counter() - w0  # this process's own (time/* metrics are means over ranks)
                rec = probe.pop()
                if i < spec.warmup:
                    continue
                row = step_row(rec, m, c0, l0, wall)
                steps.append(row)
                if on_step:
                    on_step(i - spec.warmup + 1, row)
        res = summarize(spec, steps)
        res["setup_s"] = setup_s
        res["generator"] = generator_info(st.generator, spec.backend)
        res["memory"] = memory_breakdown(st, runtime, res["step"]["peak_mb"])
        res["memory"]["peak_resettable"] = probe.resettable
        from zoo.models import count_parameters

        res["parameters"] = {
            "policy": count_parameters(st.models.policy),
            "critic": count_parameters(st.models.critic) if st.models.critic is not None else None,
            "reference_copy": bool(st.reference is not None and not st.reference.shares_policy),
        }
        pol, crit = res["parameters"]["policy"], res["parameters"]["critic"] or {"total": 0, "trainable": 0}
        res["train_flops"] = train_flops(
            pol["total"],
            res["phases"]["train"]["tokens"],
            res["phases"]["train"]["seconds"],
            crit["total"],
            res["phases"].get("critic", {}).get("tokens", 0.0),
            trainable=pol["trainable"],
            critic_trainable=crit["trainable"],
        )
        res["decode"] = measure_decode(
            st.models.policy,
            spec.autocast,
            device,
            [s["decode"] for s in steps],
            res["phases"]["generate"]["seconds"],
            res["phases"]["generate"]["tokens"],
        )
        res["bound"] = step_bound(st, spec, steps, res)
        res["device"] = str(device)
        del st
    return res


@contextlib.contextmanager
def _closing(st: Any) -> Iterator[None]:
    """Stop an async bench's rollout workers when the steps end (also on an error)."""
    try:
        yield
    finally:
        close_rollouts(st)


#: the metrics of an async bench (docs/guides/async.md) a step row keeps
ASYNC_METRICS = ("async/staleness_mean", "async/generate_s", "time/wait_workers", "time/wait_trainer")


def step_row(rec: dict[str, Any], m: dict[str, Any], cpu0: float, load0: float, wall: float) -> dict[str, Any]:
    """One measured step's row from the probe's record `rec` and the step's metrics `m`: per phase its
    seconds (the trainer's own timers where it has them), tokens and peak; decode, work, the step's
    totals (cpu0 / load0: CPU seconds and load average when it started; wall: its seconds here) and a
    few of its metrics."""
    row = {p: dict(rec.get(p, {"seconds": 0.0, "tokens": 0.0, "peak_mb": 0.0})) for p in PHASES}
    for p, key in (
        ("generate", "time/generate"),
        ("score", "time/score"),
        ("forward", "time/forward"),
        ("advantage", "time/advantage"),
        ("train", "time/train"),
    ):
        if key in m:  # the trainer's own timers are the reference for seconds
            row[p]["seconds"] = float(m[key])
    row["decode"] = dict(rec.get("decode", {}))
    row["work"] = rec.get("work", {})  # every forward's positions, for the step's bound
    row["step"] = {
        "seconds": float(m["time/step"]),
        "cpu_s": cpu_seconds() - cpu0,
        "wall_s": wall,
        "loadavg_1m": max(load0, loadavg_1m()),
        "peak_mb": max(r["peak_mb"] for p, r in row.items() if p in PHASES),
        "tokens": float(rec.get("generate", {}).get("tokens", 0.0)),
        "sync_s": float(m.get("time/sync", 0.0)),
    }
    row["metrics"] = {
        k: float(m[k])
        for k in (
            "reward/total",
            "accuracy",
            "completion/len_mean",
            "loss/policy",
            "groups/rounds",
            "optim/updates",
            *ASYNC_METRICS,
        )
        if k in m
    }
    return row


def step_bound(st: Any, spec: BenchSpec, steps: list[dict[str, Any]], res: dict[str, Any]) -> dict[str, Any]:
    """`zoo.bench.phase_bound.phase_bounds` of a bench: each model's dims and weight bytes, the measured
    seconds, the steps' work, the decode row's rates and bound, the applied optimizer steps and
    trainable parameters."""
    from zoo.bench.bound import matmul_dims, weight_bytes
    from zoo.bench.decode import AUTOCAST_DTYPES
    from zoo.bench.phase_bound import phase_bounds

    read = AUTOCAST_DTYPES.get(spec.autocast)  # under autocast the matmuls read bf16 copies of the weights
    models = {"policy": st.models.policy, "critic": st.models.critic}
    if st.reference is not None and not st.reference.shares_policy:
        models["reference"] = st.reference.model
    dims = {r: {**matmul_dims(m), "weight_bytes": weight_bytes(m, read)} for r, m in models.items() if m is not None}
    seconds = {p: r["seconds"] for p, r in res["phases"].items()} | {"step": res["step"]["seconds"]}
    crit = res["parameters"]["critic"]
    return phase_bounds(
        seconds,
        [s.get("work", {}) for s in steps],
        dims,
        res["decode"],
        median([s["metrics"].get("optim/updates", float("nan")) for s in steps]),
        res["parameters"]["policy"]["trainable"] + (crit["trainable"] if crit else 0),
        spec.checkpointing,
    )


def generator_info(generator: Any, backend: Any) -> dict[str, Any]:
    """The generator's name and start-up seconds (an engine started on first use, so after the warm-up:
    `startup_s` where the generator has one, e.g. vLLM's engine; 0.0 for one that starts nothing, as
    `hf`, which samples with the policy module itself)."""
    name = backend if isinstance(backend, str) else dict(backend).get("name", "?")
    return {"name": name, "startup_s": float(getattr(generator, "startup_s", 0.0) or 0.0)}


def train_flops(
    params: float,
    tokens: float,
    seconds: float,
    critic_params: float = 0.0,
    critic_tokens: float = 0.0,
    *,
    trainable: float | None = None,
    critic_trainable: float | None = None,
) -> dict[str, float]:
    """Achieved FLOP/s estimate of the train phase: (4 x params + 2 x trainable) x tokens / seconds,
    plus the same of the critic's params and positions with a critic. trainable: the parameters that
    get a gradient (default all: full fine-tuning).

    Kaplan et al. 2020 (arXiv:2001.08361) section 2.1: a forward is 2N FLOPs per token (one multiply-add
    per weight), the backward twice that, 4N, so training is 6N with every weight trainable. The
    backward's 4N is 2N for the activations' gradients (through every weight, frozen or not) and 2N for
    the weights' gradients, which only a trainable weight needs: with LoRA's frozen base (trainable T
    << N) a step is 2N + 2N + 2T = 4N + 2T, ~4N, not 6N (zoo.bench.bound.backward_flops counts the same)."""
    trainable = params if trainable is None else trainable
    critic_trainable = critic_params if critic_trainable is None else critic_trainable
    flops = (4.0 * params + 2.0 * trainable) * tokens + (4.0 * critic_params + 2.0 * critic_trainable) * critic_tokens
    return {
        "params": float(params),
        "trainable": float(trainable),
        "tokens": float(tokens),
        "critic_params": float(critic_params),
        "critic_trainable": float(critic_trainable),
        "critic_tokens": float(critic_tokens),
        "seconds": float(seconds),
        "flops": flops,
        "flops_per_s": flops / seconds if seconds > 0 else float("nan"),
    }


def summarize(spec: BenchSpec, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The bench's result from its measured steps' rows: per phase the median seconds and tokens,
    tokens/s and the highest peak (critic only where one ran), the step's, the run's metrics, the
    machine and the versions."""
    phases = {}
    has_critic = any(s["critic"]["seconds"] > 0 or s["critic"]["tokens"] > 0 for s in steps)
    for p in PHASES:
        if p == "critic" and not has_critic:
            continue  # no critic in this variant
        sec = median([s[p]["seconds"] for s in steps])
        tok = median([s[p]["tokens"] for s in steps])
        phases[p] = {
            "seconds": sec,
            "tokens": tok,
            "tokens_per_s": tok / sec if sec > 0 and tok > 0 else 0.0,
            "real_tokens": median([s[p].get("real_tokens", s[p]["tokens"]) for s in steps]),
            "peak_mb": max((s["train" if p == "critic" else p]["peak_mb"] for s in steps), default=float("nan")),
        }  # the critic's peak is the train phase's
    step = {
        "seconds": median([s["step"]["seconds"] for s in steps]),
        "cpu_s": median([s["step"].get("cpu_s", float("nan")) for s in steps]),
        "wall_s": median([s["step"].get("wall_s", float("nan")) for s in steps]),
        "loadavg_1m": max((s["step"].get("loadavg_1m", float("nan")) for s in steps), default=float("nan")),
        "peak_mb": max((s["step"]["peak_mb"] for s in steps), default=float("nan")),
        "tokens": median([s["step"]["tokens"] for s in steps]),
        "sync_s": median([s["step"].get("sync_s", 0.0) for s in steps]),
    }
    step["tokens_per_s"] = step["tokens"] / step["seconds"] if step["seconds"] > 0 else 0.0
    metrics = {
        k: median([s["metrics"].get(k, float("nan")) for s in steps])
        for k in ("reward/total", "accuracy", "completion/len_mean", "groups/rounds")
    }
    if spec.max_staleness is not None:
        metrics.update({k: median([s["metrics"].get(k, float("nan")) for s in steps]) for k in ASYNC_METRICS})
    return {
        "spec": asdict(spec),
        "phases": phases,
        "step": step,
        "metrics": metrics,
        "steps": steps,
        "machine": machine_info(),
        "versions": versions(),
    }


# --------------------------------------------------------------------------- subprocess workers


def main(argv: list[str]) -> int:
    """The worker `python -m zoo.bench SPEC.json OUT.json` (zoo/bench/__main__.py): `run_bench` of the
    spec in SPEC.json (keys BenchSpec does not know, such as "label", are ignored), written to OUT.json."""
    spec_d = json.loads(Path(argv[0]).read_text())
    spec_d = {k: v for k, v in spec_d.items() if k in BenchSpec.__dataclass_fields__}
    res = run_bench(BenchSpec(**spec_d))
    Path(argv[1]).write_text(json.dumps(res, default=str))
    return 0
