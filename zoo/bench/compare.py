"""Comparisons, each configuration in its own process (zoo/bench/workers.py): peak memory per
variant (`compare_memory`), a scan of one setting (`scan`), and the race with TRL's GRPOTrainer at
matched settings (`vs_trl`, the TRL side in zoo/bench/trl.py)."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any, Callable, Sequence

from zoo.bench.machine import machine_info, median, versions
from zoo.bench.run import run_bench
from zoo.bench.spec import TRL_MATCHED_VARIANT, BenchSpec
from zoo.bench.workers import bench_in_subprocess, run_worker


def compare_memory(
    base: BenchSpec,
    variants: Sequence[str],
    modes: Sequence[bool] = (False, True),
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Each variant x (full, LoRA) in its own process, on the same model and batch; `ratio_to_first`
    is each variant's peak memory over the first variant's (the baseline named first)."""
    rows = []
    for lora in modes:
        for v in variants:
            spec = replace(base, variant=v, lora=lora)
            r = bench_in_subprocess(spec, log=log)
            rows.append(
                {
                    "variant": v,
                    "mode": "lora" if lora else "full",
                    "step_s": r["step"]["seconds"],
                    **r["memory"],
                    "phases": {p: v["seconds"] for p, v in r["phases"].items()},
                    "parameters": r["parameters"],
                    "result": r,
                }
            )
    ratios = {}
    first = variants[0] if variants else None
    for mode in ("full", "lora"):
        by = {r["variant"]: r for r in rows if r["mode"] == mode}
        if first in by:
            ratios[mode] = {v: by[v]["peak_mb"] / by[first]["peak_mb"] for v in by}
    return {"rows": rows, "baseline": first, "ratio_to_first": ratios, "spec": asdict(base)}


#: the BenchSpec fields `scan` varies
SCAN_KEYS = ("group_size", "max_new_tokens", "prompts", "micro_batch")


def parse_scan(text: str) -> tuple[str, list[int]]:
    """ "group_size=2,4,8" -> ("group_size", [2, 4, 8]). Raises ValueError."""
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


def scan(
    base: BenchSpec, key: str, values: Sequence[int], log: Callable[[str], None] | None = None, in_process: bool = False
) -> dict[str, Any]:
    """One bench per value of `key` (each in its own process unless `in_process`)."""
    points = []
    for v in values:
        spec = replace(base, **{key: v})
        r = run_bench(spec) if in_process else bench_in_subprocess(spec, log=log)
        points.append(
            {
                "value": v,
                "step_s": r["step"]["seconds"],
                "peak_mb": r["step"]["peak_mb"],
                "phases": {p: v["seconds"] for p, v in r["phases"].items()},
                "gen_tokens": r["phases"]["generate"]["tokens"],
                "train_tokens": r["phases"]["train"]["tokens"],
                "len_mean": r["metrics"].get("completion/len_mean"),
                "memory": r["memory"],
            }
        )
    return {"key": key, "points": points, "spec": asdict(base)}


def vs_trl(base: BenchSpec, rounds: int = 2, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """zoo (TRL-matched GRPO) and TRL's GRPOTrainer, alternating A B / B A over `rounds`,
    each run in its own process (own peak memory)."""
    from zoo.bench.trl import trl_spec  # here, not at the top: `python -m zoo.bench.trl` imports this package first

    spec = replace(base, variant=TRL_MATCHED_VARIANT, updates="1x1")
    zoo_d = asdict(spec) | {"label": "zoo"}
    trl_d = trl_spec(spec) | {"label": "trl"}
    out: dict[str, list[dict[str, Any]]] = {"zoo": [], "trl": []}
    for r in range(rounds):
        order = ("zoo", "trl") if r % 2 == 0 else ("trl", "zoo")
        for side in order:
            if side == "zoo":
                res = run_worker("zoo.bench", zoo_d, log=log)
                out["zoo"].append(
                    {
                        "step_times": [s["step"]["seconds"] for s in res["steps"]],
                        "cpu_s": [s["step"]["cpu_s"] for s in res["steps"]],
                        "loadavg_1m": res["step"]["loadavg_1m"],
                        "peak_mb": res["step"]["peak_mb"],
                        "len_mean": res["metrics"]["completion/len_mean"],
                        "reward": res["metrics"]["reward/total"],
                        "phases": {p: v["seconds"] for p, v in res["phases"].items()},
                    }
                )
            else:
                out["trl"].append(run_worker("zoo.bench.trl", trl_d, log=log))
    summary = {}
    for side in ("zoo", "trl"):
        times = [t for r in out[side] for t in r["step_times"]]
        summary[side] = {
            "step_s": median(times),
            "step_times": times,
            "cpu_s": median([c for r in out[side] for c in r["cpu_s"]]),
            "loadavg_1m": max(r["loadavg_1m"] for r in out[side]),
            "peak_mb": max(r["peak_mb"] for r in out[side]),
            "len_mean": median([r.get("len_mean", float("nan")) for r in out[side]]),
            "reward": median([r.get("reward", float("nan")) for r in out[side]]),
        }
    ratio = {
        "step_time": summary["zoo"]["step_s"] / summary["trl"]["step_s"],
        "peak_mem": summary["zoo"]["peak_mb"] / summary["trl"]["peak_mb"],
    }
    return {
        "zoo": summary["zoo"],
        "trl": summary["trl"],
        "ratio": ratio,
        "rounds": out,
        "spec": asdict(spec),
        "trl_config": trl_d,
        "machine": machine_info(),
        "versions": versions(),
    }
