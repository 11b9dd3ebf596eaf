"""The run file's `async:` block before anything loads (docs/guides/async.md): what the asynchronous
step supports. Its keys and their ranges are the schema's (`zoo.config.run_sections.Async`); this check
refuses the combinations the asynchronous step does not implement, one line each naming the key, and a
`backend: ray` without Ray installed."""

from __future__ import annotations

from zoo.checks.registry import BeforeLoad, Report, check
from zoo.config.run import async_opts

#: sampling backends whose rollouts a worker reproduces: HF `generate` on the worker's copy of the policy
WORKER_BACKENDS = ("hf",)


def async_errors(s: BeforeLoad) -> list[str]:
    """Why the run's `async:` block cannot run (empty when it can, or when there is no block)."""
    a = async_opts(s.cfg)
    if a is None:
        return []
    cfg, out = s.cfg, []
    backend = cfg.sampling.backend if isinstance(cfg.sampling.backend, str) else cfg.sampling.backend.get("name")
    if backend not in WORKER_BACKENDS:
        out.append(
            f"async: sampling.backend {backend!r} is not supported with async: the rollout workers sample "
            f"with HF generate on their own copy of the policy; use sampling.backend: {' or '.join(WORKER_BACKENDS)}"
        )
    if cfg.training.strategy != "single" or s.world_size > 1:
        out.append(
            "async: training.strategy must be single (one trainer process) with async; "
            f"got {cfg.training.strategy} on {s.world_size} process(es)"
        )
    if isinstance(cfg.task, dict) and cfg.task.get("env") is not None:
        out.append("async: task.env (multi-turn rollouts) is not supported with async; remove task.env or async")
    out += _variant_errors(s)
    if a.backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            out.append(
                "async.backend ray: Ray is not installed (pip install 'variant-zoo[ray]'); or use async.backend: thread"
            )
    return out


def _variant_errors(s: BeforeLoad) -> list[str]:
    """The variant's slots the asynchronous step does not implement: sampling filters (their refill
    rounds would generate inside the step) and a greedy baseline (ReMax: a greedy completion per prompt)."""
    from zoo.core.fields import declared_reads
    from zoo.step.greedy import FIELD as GREEDY

    c = s.components or {}
    out = []
    if c.get("filter"):
        out.append(
            "async: the variant's sampling filters (slots.filter: dynamic sampling) are not supported with "
            "async (a refill round would generate inside the step); set filter: [] or remove async"
        )
    if c.get("advantage") is not None and GREEDY in declared_reads(c["advantage"]):
        out.append("async: an advantage estimator with a greedy baseline (remax) is not supported with async")
    return out


@check("async", "before_load")
def async_block(s: BeforeLoad, rep: Report) -> None:
    """`async_errors`."""
    rep.errors += async_errors(s)
