"""Observation points of the training step: where a phase starts and ends, and where a model runs a
forward, so that a tool (the benchmark's probe, `zoo.bench.probe`) can measure the step without
replacing any of its functions.

    with hooks.phase("generate") as ph:   # one per stage: generate, score, forward, advantage, train
        b = generate(...)                 # (+ "critic", the critic's share, inside train)
        ph.batch = b                      # the rows the phase produced or worked on
    with hooks.forward("policy", mb):     # one per model forward over a micro-batch
        logp = forward_logp(...)          # roles: policy, reference, critic

`NO_HOOKS` (the default of `pipeline.step`) does nothing; a subclass of `Hooks` overrides what it
observes. A hook only watches: it must not change the batch, the models or the numbers.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

#: the phases the step reports, in order ("critic" runs inside "train")
PHASES = ("generate", "forward", "score", "advantage", "train", "critic")
#: models that run forwards in the step
ROLES = ("policy", "reference", "critic")


@dataclass
class Phase:
    """One span of a stage, as the hooks see it. `batch`: the rows the phase produced (generate:
    the completions, `Batch` with `policy_tokens [N]`) or worked on (score: after length shaping, with
    `loss_mask [N, T]`; advantage: the batch the estimator read), set by the stage; None where
    the phase has no single batch (forward, train, critic)."""

    name: str
    batch: Any = None


class Hooks:
    """No-op observer of the step; override `phase` and/or `forward` to measure it."""

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        """Context manager around one phase `name` (one of `PHASES`); yields its `Phase` record,
        which the stage fills in before the context ends. Phases may nest (critic inside train)."""
        yield Phase(name)

    @contextlib.contextmanager
    def forward(self, role: str, mb: Any) -> Iterator[None]:
        """Context manager around one forward of model `role` (one of `ROLES`) over the micro-batch
        `mb` (a `zoo.core.batch.Batch`: `prompt_mask [n, P]`, `loss_mask [n, T]`)."""
        yield


#: the default: observes nothing
NO_HOOKS = Hooks()
