"""`task.env`: the environment of a multi-turn task is registered and its keys are allowed."""

from __future__ import annotations

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


@check("env", "before_load")
def env(s: BeforeLoad, rep: Report) -> None:
    """zoo.envs.base.env_errors: the environment's name and keys."""
    from zoo.envs.base import env_errors

    rep.errors += env_errors(s.cfg.task)
