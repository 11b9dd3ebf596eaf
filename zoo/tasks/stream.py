"""An endless, seeded, resumable stream of training rows.

    stream = PromptStream(task.train, seed=0)
    batch = stream.take(8)                 # 8 rows; epochs roll over inside a batch
    state = stream.state_dict()            # {"seed": 0, "epoch": 0, "index": 8, "n_rows": 512}
    ...
    stream2 = PromptStream(task.train, seed=0); stream2.load_state_dict(state)
    stream2.take(8) == stream.take(8)      # a resumed run continues at the same data position

Epoch e visits every row once in the order `random.Random(derive_seed(seed, f"stream:{e}"))`
shuffles them to, so the order depends only on (seed, epoch), never on how many rows were taken
before a checkpoint.
"""

from __future__ import annotations

import random
from typing import Any, Iterator, Mapping, Sequence

from zoo.tasks.base import derive_seed


class PromptStream:
    """Yields `rows` epoch after epoch, each epoch a seeded permutation.

    rows: the training rows (not copied; must not be empty). seed: int.
    Iterating never stops; `take(n)` returns the next n rows as a list.
    `state_dict()` -> {"seed", "epoch", "index", "n_rows"} (JSON-serialisable); `load_state_dict`
    restores it and raises ValueError if the seed or the number of rows differ (a different dataset
    would silently continue at a meaningless position).
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], seed: int = 0):
        if len(rows) == 0:
            raise ValueError("PromptStream needs at least one row")
        self.rows = rows
        self.seed = int(seed)
        self.epoch = 0
        self.index = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(derive_seed(self.seed, f"stream:{epoch}")).shuffle(order)
        return order

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return self

    def __next__(self) -> Mapping[str, Any]:
        if self.index >= len(self._order):
            self.epoch += 1
            self.index = 0
            self._order = self._permutation(self.epoch)
        row = self.rows[self._order[self.index]]
        self.index += 1
        return row

    def take(self, n: int) -> list[Mapping[str, Any]]:
        """The next `n` rows (crossing into the next epoch when needed)."""
        return [next(self) for _ in range(int(n))]

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "index": self.index, "n_rows": len(self.rows)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["seed"]) != self.seed or int(state["n_rows"]) != len(self.rows):
            raise ValueError(
                f"PromptStream state is for seed {state['seed']} and {state['n_rows']} rows; "
                f"this stream has seed {self.seed} and {len(self.rows)} rows"
            )
        self.epoch = int(state["epoch"])
        self.index = int(state["index"])
        self._order = self._permutation(self.epoch)


#: a step asking for more than this many times the task's prompts is warned about after load
#: (zoo.checks.fit); at or below it, repeats within one step are warned about before load (zoo.checks.inputs)
PROMPT_REPEAT_WARN = 4


def repeats_within_step(train_rows: int, per_step: int) -> str | None:
    """A warning when a step asks for more prompts (`budget.prompts_per_step`) than the task has
    training rows: the stream rolls into its next epoch inside the batch (`PromptStream.take`), so the
    step repeats prompts (each copy its own group: it runs, with fewer distinct prompts than asked).
    None when the rows suffice (or there are none: the loader refuses that)."""
    if not 0 < train_rows < per_step:
        return None
    return (
        f"budget.prompts_per_step {per_step} > the task's {train_rows} training prompts (task.size): each step "
        f"takes {per_step} prompts from {train_rows}, so it repeats prompts within the step (the prompt stream "
        f"starts its next pass inside the batch), about {per_step / train_rows:.3g}x each; raise task.size "
        f"or lower budget.prompts_per_step to {train_rows} or less"
    )
