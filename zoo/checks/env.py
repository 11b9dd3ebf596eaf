"""`task.env`: the environment of a multi-turn task is registered, its keys are allowed, and it is built
once (its factory, its `stop`, its reset of the task's first row: zoo.envs.contract.probe), so an
env's error comes before any weights load."""

from __future__ import annotations

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


@check("env", "before_load")
def env(s: BeforeLoad, rep: Report) -> None:
    """zoo.envs.base.env_errors (the environment's name and keys), then zoo.envs.contract.probe."""
    from zoo.checks.task import task_rows
    from zoo.envs.base import env_errors, env_spec
    from zoo.envs.contract import probe

    errors = env_errors(s.cfg.task)
    rep.errors += errors
    if errors or env_spec(s.cfg.task) is None:
        return
    try:
        rows = task_rows(s.cfg.task)[:1]
    except Exception:  # noqa: BLE001 - the `task` check said why
        rows = []
    rep.errors += probe(env_spec(s.cfg.task), rows)
