"""Stateful rewards: a reward that holds something for the whole run (a reward model's weights), set up
and torn down by the run that uses it, never kept in a module-level global.

A stateful reward is registered like any reward (a function with the `(completions, rows)` contract
and keyword-only hyperparameters) and names, in its registration, the class that holds its state:

    class Scorer:                                     # the session: one per run
        def __init__(self, *, model: str): ...        # the reward's hyperparameters (the spec's)
        def setup(self, device: torch.device): ...    # load once, on the run's device
        def __call__(self, completions, rows): ...    # the reward contract: N scores
        def teardown(self): ...                       # free it (the run calls it, also after a failure)

    @register("reward", "my_rm", session=Scorer)
    def my_rm(completions, rows, *, model: str):
        return score_once(Scorer, completions, rows, model=model)   # a one-off call (tests, scripts)

`open_rewards(rewards, device)` (the trainer, at setup) turns each such component into a `LiveReward`
with its session set up; `close_rewards` (the trainer, when the run ends) tears them down. Plain
rewards pass through unchanged. Under data parallelism every rank opens its own session and scores its
own rows (zoo.step.sample scores the rank's slice). docs/guides/extending.md §4.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch

from zoo.core.declarations import of as declared

log = logging.getLogger(__name__)


@dataclass
class LiveReward:
    """A stateful reward component with its session open: called like the component (same name,
    declarations and resolved spec), scoring through `session`."""

    component: Any  # zoo.core.registry.Component
    session: Any

    @property
    def name(self) -> str:
        return self.component.name

    @property
    def decl(self) -> Any:  # zoo.core.declarations.Declaration
        return self.component.decl

    @property
    def params(self) -> Mapping[str, Any]:
        return self.component.params

    def resolved(self) -> dict[str, Any]:
        return self.component.resolved()

    def spec(self) -> dict[str, Any]:
        return self.component.spec()

    def __call__(self, completions: list[str], rows: list[dict]) -> list[float | None]:
        return self.session(completions, rows)


def session_class(component: Any) -> Callable[..., Any] | None:
    """The session class a reward registered with `session=`, or None for a plain reward."""
    return declared(component).session


def open_rewards(rewards: Sequence[tuple[Any, float]], device: torch.device) -> list[tuple[Any, float]]:
    """[(component, weight)] -> the same list with each stateful reward replaced by a `LiveReward`
    whose session is set up on `device` (plain rewards unchanged). A setup that raises tears down
    the sessions already opened, then re-raises."""
    out: list[tuple[Any, float]] = []
    try:
        for comp, w in rewards:
            cls = session_class(comp)
            if cls is None:
                out.append((comp, w))
                continue
            session = cls(**comp.params)
            session.setup(device)
            out.append((LiveReward(comp, session), w))
    except BaseException:
        close_rewards(out)
        raise
    return out


def close_rewards(rewards: Sequence[tuple[Any, float]]) -> None:
    """Tear down every open session, last opened first; a teardown that raises is logged, the others
    still run."""
    for comp, _ in reversed(list(rewards)):
        if isinstance(comp, LiveReward):
            try:
                comp.session.teardown()
            except Exception as e:  # noqa: BLE001 - the run's own outcome matters more
                log.warning("reward %s: teardown raised %s: %s", comp.name, type(e).__name__, e)


def live_session(rewards: Sequence[tuple[Any, float]], name: str) -> Any | None:
    """The open session of the reward named `name` in an opened reward list, or None."""
    return next((c.session for c, _ in rewards if isinstance(c, LiveReward) and c.name == name), None)


def score_once(
    cls: Callable[..., Any],
    completions: list[str],
    rows: list[dict],
    *,
    device: torch.device | str = "cpu",
    **params: Any,
) -> list[float | None]:
    """One call of a stateful reward outside a run: set up a session of `cls(**params)` on `device`,
    score, tear down (a model loads for this call only)."""
    session = cls(**params)
    session.setup(torch.device(device))
    try:
        return session(completions, rows)
    finally:
        session.teardown()
