"""Progress inside one rollout step, for a step long enough to need it (a large
`budget.prompts_per_step`): the generator reports each chunk of completions it finished, and whoever
shows progress (the trainer's progress bar, zoo.run.progress) listens.

    with listening(lambda phase, done, total: print(phase, done, total)):
        generate_rollout(...)       # calls report("generate", done, total) after each chunk

No listener (the default): `report` does nothing. The listener is a context variable, so threads and
nested runs each see their own.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator

Listener = Callable[[str, int, int], None]
_LISTENER: ContextVar[Listener | None] = ContextVar("zoo_step_progress", default=None)


def report(phase: str, done: int, total: int) -> None:
    """Tell the listener (if any) that `done` of `total` units of `phase` (e.g. "generate":
    completions) are finished."""
    fn = _LISTENER.get()
    if fn is not None:
        fn(phase, done, total)


@contextlib.contextmanager
def listening(fn: Listener) -> Iterator[None]:
    """`fn(phase, done, total)` receives every `report` made inside the block."""
    token = _LISTENER.set(fn)
    try:
        yield
    finally:
        _LISTENER.reset(token)
