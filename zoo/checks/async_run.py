"""The run file's `async:` block before anything loads (docs/guides/async.md): what the asynchronous
step supports. Its keys and their ranges are the schema's (`zoo.config.run_sections.Async`); this check
refuses the combinations the asynchronous step does not implement, one line each naming the key, and a
`backend: ray` without Ray installed.

`async.workers` is bounded by the capacity rule (zoo.step.pacing.capacity): at most B x (k + 1) groups
(B = budget.prompts_per_step, k = max_staleness) are dispatched and not yet trained at any time, and a
worker samples one group at a time, so workers beyond B x (k + 1) never get a group while each holds
its own copy of the policy (a thread's in this process, a Ray actor's process): refused, naming the
bound (ours). `backend: simulated` has no workers (zoo.step.simulated samples in the trainer's
process), so a `workers` other than the default 1 beside it is not used: a warning, not an error, so that a study can
sweep `async.backend` over arms that share one `workers` (ours)."""

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
    cap = cfg.budget.prompts_per_step * (a.max_staleness + 1)  # groups in flight at most (module doc)
    if a.backend != "simulated" and a.workers > cap:
        out.append(
            f"{_file(s)}key 'async.workers': {a.workers} is more than the {cap} groups the capacity rule lets be in flight "
            f"(budget.prompts_per_step {cfg.budget.prompts_per_step} x (async.max_staleness {a.max_staleness} "
            f"+ 1)); the other workers would never sample a group and each holds a copy of the policy: set "
            f"async.workers to 1..{cap}"
        )
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
        out.append(
            "async: slots.advantage: an advantage estimator with a greedy baseline (remax) is not supported with "
            "async (its greedy completion per prompt would generate inside the step); choose another advantage "
            "(e.g. rloo or group_mean) or remove async"
        )
    return out


def _file(s: BeforeLoad) -> str:
    """`run.yaml: ` for a run read from a file (zoo.config.user_keys.source_of), else nothing."""
    from zoo.config.user_keys import source_of

    return f"{source_of(s.cfg)}: " if source_of(s.cfg) else ""


def async_warnings(s: BeforeLoad) -> list[str]:
    """`workers` written beside `backend: simulated`, which has none (module doc)."""
    a = async_opts(s.cfg)
    # a value other than the default: a study's arm configs are dumped with every default written out
    if a is None or a.backend != "simulated" or a.workers == type(a).model_fields["workers"].default:
        return []
    return [
        f"{_file(s)}key 'async.workers': {a.workers} is not used: backend simulated has no rollout workers (it samples "
        "in the trainer's process with the weights of step s - max_staleness); remove async.workers, or use "
        "backend thread or ray for workers"
    ]


@check("async", "before_load")
def async_block(s: BeforeLoad, rep: Report) -> None:
    """`async_errors` and `async_warnings`."""
    rep.errors += async_errors(s)
    rep.warnings += async_warnings(s)
