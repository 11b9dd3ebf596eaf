"""`task:` loads (the task's name, dataset and its config; did-you-mean from the task loaders), so
`zoo validate` refuses a task `zoo run` would fail to load. The prompts are kept for `after_load`'s
context check (`rows`)."""
from __future__ import annotations

import json
from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad

_ROWS: dict[str, list[dict[str, Any]]] = {}  # task spec (JSON) -> its train + eval rows: loaded once per process


def task_rows(spec: Any) -> list[dict[str, Any]]:
    """The train and eval rows of task `spec` (`zoo.tasks.load_task`), loaded once per spec in this
    process (copies of the rows' list; the run loads its own). Raises what load_task raises."""
    from zoo.tasks import load_task

    key = json.dumps(spec, sort_keys=True, default=str)
    if key not in _ROWS:
        task = load_task(spec)
        _ROWS[key] = list(task.train) + list(task.eval)
    return _ROWS[key]


@check("task", "before_load")
def task(s: BeforeLoad, rep: Report) -> None:
    try:
        task_rows(s.cfg.task)
    except (ValueError, KeyError, OSError, ImportError) as e:  # TaskError is a ValueError
        rep.errors.append(f"task: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}")
