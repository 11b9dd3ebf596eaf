"""`task:` loads (the task's name, dataset and its config; did-you-mean from the task loaders), so
`zoo validate` refuses a task `zoo run` would fail to load. The prompts are kept for `after_load`'s
context check (`rows`)."""

from __future__ import annotations

import json
from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad

_LOADED: dict[str, tuple[list[dict[str, Any]], int]] = {}  # task spec (JSON) -> (train + eval rows, eval count)


def _load(spec: Any) -> tuple[list[dict[str, Any]], int]:
    """Task `spec`'s train + eval rows and how many of them are held out, loaded once per spec in this
    process (`zoo.tasks.load_task`). Raises what load_task raises."""
    from zoo.tasks import load_task

    key = json.dumps(spec, sort_keys=True, default=str)
    if key not in _LOADED:
        task = load_task(spec)
        _LOADED[key] = (list(task.train) + list(task.eval), len(task.eval))
    return _LOADED[key]


def task_rows(spec: Any) -> list[dict[str, Any]]:
    """The train and eval rows of task `spec` (the run loads its own). Raises what load_task raises."""
    return _load(spec)[0]


def eval_rows(spec: Any) -> int:
    """How many held-out rows task `spec` has (loads it like `task_rows`)."""
    return _load(spec)[1]


@check("task", "before_load")
def task(s: BeforeLoad, rep: Report) -> None:
    try:
        task_rows(s.cfg.task)
    except (ValueError, KeyError, OSError, ImportError) as e:  # TaskError is a ValueError
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = hub_dataset(s.cfg.task)
        if where and _unreachable(msg):  # the Hub, not the file, is missing: zoo run loads it where it is reachable
            rep.notes.append(
                f"task: dataset {where!r} is on the Hugging Face Hub and not in the local cache, and the "
                "Hub is not reachable from here: not loaded, so its rows and the context length are "
                "checked when `zoo run` loads it"
            )
            return
        rep.errors.append(f"task: {msg}")
        return
    from zoo.checks.bounds import PROMPT_REPEAT_WARN
    from zoo.tasks.stream import repeats_within_step

    rows, p = len(task_rows(s.cfg.task)), s.cfg.budget.prompts_per_step
    if p <= PROMPT_REPEAT_WARN * rows and (why := repeats_within_step(rows - eval_rows(s.cfg.task), p)):
        rep.warnings.append(why)  # far above the task: bounds.work_warnings says it after load
    ev = s.cfg.eval
    if ev.enabled and ev.size > (held_out := eval_rows(s.cfg.task)):
        rep.warnings.append(
            f"eval.size {ev.size} is more than the task's {held_out} held-out prompts (task.eval_size): "
            f"the evaluation uses {held_out}"
        )


def hub_dataset(spec: Any) -> str | None:
    """The Hub id of an `hf` task's dataset (`path` shaped like `owner/name`, not a local file or folder
    and not a data file name such as `data/train.jsonl`), else None."""
    import os
    import re

    if not isinstance(spec, dict) or spec.get("name", "reasoning_gym") != "hf":
        return None
    path = spec.get("path")
    if (
        not isinstance(path, str)
        or path.startswith((".", "/", "~"))
        or os.path.exists(path)
        or not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", path)
    ):
        return None
    return None if os.path.splitext(path)[1].lower() in (".json", ".jsonl", ".parquet", ".csv") else path


def _unreachable(msg: str) -> bool:
    """Whether a load error says the Hub could not be reached (offline mode, no connection)."""
    return any(
        k in msg
        for k in (
            "HF_HUB_OFFLINE",
            "OfflineModeIsEnabled",
            "ConnectionError",
            "Couldn't reach",
            "couldn't connect",
            "Max retries exceeded",
            "Temporary failure in name resolution",
        )
    )
