"""Environments for multi-turn rollouts (registry kind `env`): the contract and `task.env`.

An environment is a small Protocol close to Gymnasium's `reset` / `step`, so existing environments
wrap in a few lines (docs/guides/extending-engine.md):

    messages, state = env.reset(row, seed)              # the conversation a trajectory starts from
    new, done, info = env.step(state, assistant_text)   # after each assistant turn

`new` are chat messages to append (None or [] with done), `info` a dict of counters (`tool_calls`,
`tool_errors`, anything else) summed per trajectory into the row's `env_info`. An optional
`step_batch(states, texts) -> list of (new, done, info)` serves many rows at once. `stop` lists the
strings that end an assistant turn besides EOS (e.g. "</calc>"). Environments are stateless across
rollout steps: the state comes from the row and the seed, so resuming a run needs nothing more.

`task.env` in a run file: a name, or {name, max_turns, max_total_tokens, timeout_s, <the env's own
hyperparameters>}; `ROLLOUT_KEYS` are the rollout's, the rest go to the registered env factory.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from zoo.core.registry import ComponentError, build, get


class Env(Protocol):
    """What a registered env factory returns (see the module doc)."""

    stop: Sequence[str]

    def reset(self, row: Mapping[str, Any], seed: int, /) -> tuple[list[dict], Any]:
        """The dataset row and a seed -> (the chat messages the trajectory starts from, its state)."""

    def step(self, state: Any, assistant_text: str, /) -> tuple[list[dict] | None, bool, dict]:
        """The state and the assistant's last turn -> (messages to append, done, info counters)."""


#: rollout keys of `task.env` with their defaults; the other keys are the env's hyperparameters
ROLLOUT_KEYS = {"max_turns": 4, "max_total_tokens": 512, "timeout_s": 10.0}


@dataclass(frozen=True)
class EnvSpec:
    """A parsed `task.env`: the env's registry spec and the rollout's limits.

    max_turns: assistant turns per trajectory (>= 1); reaching it ends the trajectory (flag
        `max_turns`, not truncation). max_total_tokens: tokens after the prompt (sampled and
        environment tokens together, >= 2); reaching it ends the trajectory as truncated.
    timeout_s: seconds one `step` (or `step_batch`) call may take; a later answer fails the trajectory.
    """

    env: dict[str, Any]
    max_turns: int = 4
    max_total_tokens: int = 512
    timeout_s: float = 10.0

    def build(self) -> Env:
        """A fresh environment from the registry. Raises ComponentError."""
        return build("env", self.env)()


def env_spec(task: Mapping[str, Any] | str | None) -> EnvSpec | None:
    """The `env` of a task spec (None: single-turn). Raises ValueError naming `task.env` and the key
    for a spec that is not a name or a mapping with `name`, an unknown key (with the close match
    among the rollout keys and the env's hyperparameters), a bad limit, or an unknown env name."""
    raw = task.get("env") if isinstance(task, Mapping) else None
    if raw is None:
        return None
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise ValueError(f"task.env: expected an env name or a mapping with 'name', got {raw!r}")
    try:
        entry = get("env", raw["name"])
    except ComponentError as e:
        raise ValueError(f"task.env.name: {e}") from None
    allowed = ["name", *ROLLOUT_KEYS, *entry.hyperparameters()]
    for k in raw:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"task.env: unknown key {k!r}{hint}; allowed: {', '.join(allowed)}")
    lim = {k: raw.get(k, d) for k, d in ROLLOUT_KEYS.items()}
    for k, lo in (("max_turns", 1), ("max_total_tokens", 2)):
        v = lim[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"task.env.{k}: must be an integer >= {lo}, got {v!r}")
    t = lim["timeout_s"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t > 0):
        raise ValueError(f"task.env.timeout_s: must be a number of seconds > 0, got {t!r}")
    env = {k: v for k, v in raw.items() if k not in ROLLOUT_KEYS}
    try:
        build("env", env)
    except ComponentError as e:
        raise ValueError(f"task.env: {e}") from None
    return EnvSpec(env=env, max_turns=lim["max_turns"], max_total_tokens=lim["max_total_tokens"], timeout_s=float(t))


def env_errors(task: Mapping[str, Any] | str | None) -> list[str]:
    """`env_spec`'s error as a one-item list ([] when the task's env is fine or absent): for `zoo
    validate` and `zoo run`'s checks before any model loads."""
    try:
        env_spec(task)
    except ValueError as e:
        return [str(e)]
    return []


def without_env(task: Mapping[str, Any]) -> dict[str, Any]:
    """The task spec without its `env` key (what the task loaders read)."""
    return {k: v for k, v in task.items() if k != "env"}
