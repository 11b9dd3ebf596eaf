"""The environment contract, checked where it is crossed
(docs/guides/extending-engine.md, "The environment contract"): every `reset` / `step` / `step_batch`
result and the env's `stop`, before anything of it reaches the chat template or the tokenizer.

- `stop`: absent (no stop string) or a sequence of non-empty strings; a plain str is refused (it would
  be read as its characters).
- `reset(row, seed) -> (messages, state)`: a non-empty list of mappings with a `role` of RESET_ROLES
  (the task's few-shot turns may be the assistant's) and `str` content.
- `step(state, text) -> (messages or None, done, info)`: messages a list of mappings with a `role` of
  ENV_ROLES (never "assistant": environment text is not the model's turn) and `str` content, empty
  only with done; `done` a bool (numpy's too); `info` a mapping of names to finite real numbers (numpy's
  too; not bools) or None.

A broken result raises `EnvContractError` (a `RunFailed`: the run ends with status failed, one line,
its checkpoints kept) naming the env, the method, what came back and what is allowed. An env that
*raises* fails only its trajectory (zoo.envs.rollout), unless every reset of a step raised.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping, Sequence

from zoo.core.guards import RunFailed

#: roles an environment's step may give its messages
ENV_ROLES = ("user", "tool", "system")
#: roles of the conversation reset starts from (the task's own few-shot turns included)
RESET_ROLES = ("system", "user", "assistant", "tool")


class EnvContractError(RunFailed):
    """An environment returned something outside its contract (see the module doc)."""


def _shown(x: Any) -> str:
    s = repr(x)
    return s if len(s) <= 80 else s[:77] + "..."


def check_stop(env: Any, name: str) -> tuple[str, ...]:
    """The env's stop strings as a tuple (() when it has no `stop`). Raises EnvContractError for a str
    or a sequence with an empty or non-str item."""
    stop = getattr(env, "stop", ())
    if stop is None:
        return ()
    if isinstance(stop, str):
        raise EnvContractError(
            f"env {name!r}: stop = {_shown(stop)} is a str; it must be a sequence of non-empty strings, "
            f"e.g. stop = ({stop!r},) (or absent: no stop string)"
        )
    if not isinstance(stop, Sequence) or not all(isinstance(s, str) and s for s in stop):
        raise EnvContractError(
            f"env {name!r}: stop = {_shown(stop)}; it must be a sequence of non-empty strings (or absent)"
        )
    return tuple(stop)


def check_messages(msgs: Any, name: str, method: str, roles: Sequence[str]) -> list[dict]:
    """`msgs` as a list of plain dicts. Raises EnvContractError naming the env, the method, the first
    bad message and what is allowed."""
    want = f"a list of {{'role': one of {', '.join(roles)}, 'content': str}}"
    if not isinstance(msgs, list):
        raise EnvContractError(f"env {name!r}: {method} returned messages {_shown(msgs)}; expected {want}")
    for i, m in enumerate(msgs):
        bad = None
        if not isinstance(m, Mapping):
            bad = "is not a mapping"
        elif m.get("role") not in roles:
            bad = f"has role {_shown(m.get('role'))}" + (
                " (environment text is never the model's own turn)" if m.get("role") == "assistant" else ""
            )
        elif not isinstance(m.get("content"), str):
            bad = f"has content of type {type(m.get('content')).__name__}"
        if bad:
            raise EnvContractError(
                f"env {name!r}: {method} returned message {i} {_shown(m)}, which {bad}; expected {want}"
            )
    return [dict(m) for m in msgs]


def check_reset(res: Any, name: str) -> tuple[list[dict], Any]:
    """A reset result as (messages, state). Raises EnvContractError."""
    if not (isinstance(res, tuple) and len(res) == 2):
        raise EnvContractError(
            f"env {name!r}: reset returned {_shown(res)}; expected (messages, state) with messages a "
            "non-empty list of chat messages"
        )
    msgs = check_messages(res[0], name, "reset", RESET_ROLES)
    if not msgs:
        raise EnvContractError(f"env {name!r}: reset returned no messages; the conversation needs at least one")
    return msgs, res[1]


def check_step(res: Any, name: str, method: str = "step") -> tuple[list[dict] | None, bool, dict[str, float]]:
    """A step result as (messages or None, done, info). Raises EnvContractError."""
    if not (isinstance(res, tuple) and len(res) == 3):
        raise EnvContractError(
            f"env {name!r}: {method} returned {_shown(res)}; expected (messages or None, done, info)"
        )
    new, done, info = res
    if getattr(done, "dtype", None) is not None and done.dtype.kind == "b" and getattr(done, "ndim", 1) == 0:
        done = bool(done)  # numpy's bool (a Gymnasium env's `terminated or truncated`)
    if not isinstance(done, bool):
        raise EnvContractError(f"env {name!r}: {method} returned done = {_shown(done)}; expected a bool")
    msgs = None if new is None else check_messages(new, name, method, ENV_ROLES)
    if not msgs and not done:
        raise EnvContractError(
            f"env {name!r}: {method} returned messages {_shown(new)} with done=False; a trajectory that goes "
            "on needs at least one message (return done=True to end it)"
        )
    if info is None:
        info = {}
    if not isinstance(info, Mapping):
        raise EnvContractError(f"env {name!r}: {method} returned info {_shown(info)}; expected a mapping of numbers")
    for k, v in info.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise EnvContractError(
                f"env {name!r}: {method} returned info[{k!r}] = {_shown(v)}; info values must be finite numbers"
            )
    return msgs, done, {str(k): float(v) for k, v in info.items()}


def probe(spec: Any, rows: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Build the env of `spec` (a zoo.envs.base.EnvSpec) once, check its `stop` and, with `rows`,
    its reset of the first row: errors as lines (for `zoo validate` and `zoo run`'s checks, before
    any weights load)."""
    name = str(spec.env.get("name"))
    try:
        env = spec.build()
    except Exception as e:  # noqa: BLE001 - a user's factory: any error is the message
        return [f"task.env: env {name!r}: building it raised {type(e).__name__}: {e}"]
    if env is None:
        return [f"task.env: env {name!r}: its factory returned None; it must return the environment"]
    try:
        check_stop(env, name)
        if rows:
            try:
                res = env.reset(rows[0], 0)
            except Exception as e:  # noqa: BLE001
                return [f"task.env: env {name!r}: reset of the task's first row raised {type(e).__name__}: {e}"]
            check_reset(res, name)
    except EnvContractError as e:
        return [f"task.env: {e}"]
    return []
