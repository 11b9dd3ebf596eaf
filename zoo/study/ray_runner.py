"""A study's arms as Ray tasks: `zoo ablate STUDY --ray [--ray-address ADDRESS]`.

    zoo ablate experiments/mo_grpo_bandit.yaml --ray                        # start a local Ray here
    zoo ablate experiments/mo_grpo_bandit.yaml --ray-address auto           # the running cluster (`ray start`)
    zoo ablate experiments/mo_grpo_bandit.yaml --ray-address ray://head:10001

`zoo.study.runner.run_study` plans as always (variants checked, config changes refused, shard
selected); then each selected arm is one Ray task (`max_retries=0`) asking for the study's
`resources: {cpus: N, gpus: M}` (defaults: 1 GPU where the cluster has GPUs, else none; CPUs = the
run's thread count, `--threads`, else 1). The task pins torch to that many threads (recorded as the
run's thread choice, zoo.run.threads; a local Ray's workers get OMP_WAIT_POLICY=PASSIVE) and runs
`runner.run_arm`: the arm's lease (zoo.run.lock, safe across hosts), the skip/resume rules
(zoo.study.arm_claim) and the failure record are the sequential runner's. A task that dies (a
killed worker, a lost node) is recorded failed in the arm's summary.json; the other arms go on. The
report is written at the end, on the driver.

Shared filesystem assumed: every node must see the study's `output_dir` at the same path (NFS, a
cluster file system); a relative `output_dir` is made absolute on the driver. Every node needs zoo
installed (a local Ray started here puts this checkout's zoo on the workers' PYTHONPATH).
Ray is the optional extra `pip install 'variant-zoo[ray]'`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from zoo.config.run import effective_variant
from zoo.config.variant import VariantError
from zoo.study.experiment import Arm, Resources
from zoo.study.runner import record_failure, run_arm

RAY_INSTALL = "pip install 'variant-zoo[ray]'  (or pip install 'ray[default]>=2.9')"


def import_ray() -> Any:
    """The `ray` module. Raises VariantError with the install command when Ray is not installed."""
    try:
        import ray
    except ImportError:
        raise VariantError(f"--ray needs Ray, which is not installed: {RAY_INSTALL}") from None
    return ray


def arm_resources(resources: Resources, cluster: Mapping[str, float], threads: int | None) -> dict[str, float]:
    """Ray task options for one arm: {"num_cpus": resources.cpus, else `threads`, else 1;
    "num_gpus": resources.gpus, else 1 where `cluster` (ray.cluster_resources()) has a GPU, else 0}."""
    gpus = resources.gpus if resources.gpus is not None else (1.0 if cluster.get("GPU", 0) > 0 else 0.0)
    cpus = resources.cpus if resources.cpus is not None else float(threads or 1)
    return {"num_cpus": float(cpus), "num_gpus": float(gpus)}


def _arm_task(arm: Arm, train_fn: Callable[..., Any] | None, fresh: bool, study_file: str | None, threads: int) -> str:
    """Runs on a Ray worker: one arm with `threads` torch threads; returns its final status."""
    import torch
    from rich.console import Console

    from zoo.run import threads as zt

    torch.set_num_threads(threads)
    zt.adopt(threads, "ray task", f"the arm's {threads} Ray CPU(s) (resources.cpus, else --threads, else 1)")
    return run_arm(arm, train_fn, Console(force_terminal=False, width=120), fresh, study_file)


def _absolute(arm: Arm) -> Arm:
    out = str(Path(arm.config.out_dir()).resolve())
    return dataclasses.replace(arm, config=arm.config.model_copy(update={"output_dir": out}))


def longest_first(arms: Sequence[Arm]) -> list[Arm]:
    """The order arms are handed to Ray: arms with a critic (the longest: a second model's forward and
    update every step) first, otherwise as listed, so that the last arm to start on a busy pool is a short
    one (longest-processing-time-first, our choice; on the main job's 2 cores ppo started last and ran alone
    at the end)."""

    def has_critic(a: Arm) -> bool:
        try:
            return effective_variant(a.config).slots.critic is not None
        except VariantError:  # the task reports it
            return False

    return sorted(arms, key=lambda a: not has_critic(a))  # stable


def run_arms_on_ray(
    arms: Sequence[Arm],
    *,
    train_fn: Callable[..., Any] | None = None,
    fresh: Sequence[str] = (),
    study_file: str | None = None,
    console: Any = None,
    address: str | None = None,
    resources: Resources | None = None,
    threads: int | None = None,
    init_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Run `arms` as Ray tasks (module docstring) and return {label: final status}.

    address: None starts a local Ray here (shut down at the end); "auto" or "ray://host:port" joins a
    cluster. resources: the study's `resources` (default: all defaults). threads: `--threads`.
    init_kwargs: more `ray.init` arguments (tests: num_cpus=2). train_fn: as `runner.run_arm` (it
    must be importable on the workers). Raises VariantError when Ray is missing, or when an arm asks
    for more CPUs or GPUs than the cluster has (it would wait forever)."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, **(init_kwargs or {})}
        if address is None:
            root = str(Path(__file__).resolve().parents[2])  # the folder holding the zoo package
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
            # the workers' OpenMP threads sleep when idle, as the driver's do (zoo.run.threads): set before torch loads
            policy = os.environ.get("OMP_WAIT_POLICY") or "PASSIVE"
            kwargs.setdefault("runtime_env", {"env_vars": {"PYTHONPATH": path, "OMP_WAIT_POLICY": policy}})
            # Ray starts its workers at niceness 15 (RayConfig `worker_niceness`), so any other process on the
            # machine takes the arms' CPU first; the arms are the study's work: run them at the driver's priority
            os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(address=address, **kwargs)
    try:
        cluster = ray.cluster_resources()
        opts = arm_resources(resources or Resources(), cluster, threads)
        for key, have in (("num_cpus", cluster.get("CPU", 0)), ("num_gpus", cluster.get("GPU", 0))):
            if opts[key] > have:
                raise VariantError(
                    f"resources: each arm asks for {key.removeprefix('num_')}={opts[key]:g} but the "
                    f"Ray cluster has {have:g}; lower `resources` in the study file"
                )
        if console is not None:
            console.print(
                f"ray: {len(arms)} arm(s), each {opts['num_cpus']:g} CPU / {opts['num_gpus']:g} GPU, on "
                f"a cluster of {cluster.get('CPU', 0):g} CPU / {cluster.get('GPU', 0):g} GPU",
                highlight=False,
            )
        task = ray.remote(max_retries=0)(_arm_task).options(**opts)
        n_threads = max(1, int(opts["num_cpus"]))
        pending = {}
        for a in map(_absolute, longest_first(arms)):
            ref = task.remote(a, train_fn, a.label in fresh or a.group in fresh, study_file, n_threads)
            pending[ref] = a
        results: dict[str, str] = {}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            arm = pending.pop(done[0])
            try:
                results[arm.label] = ray.get(done[0])
            except Exception as e:  # noqa: BLE001 - the task itself died: record it, the others go on
                record_failure(arm.config.out_dir(), e)
                results[arm.label] = "failed"
            if console is not None:
                console.print(f"ray: {arm.label} {results[arm.label]}", highlight=False)
        return {a.label: results[a.label] for a in arms}
    finally:
        if started:
            ray.shutdown()
