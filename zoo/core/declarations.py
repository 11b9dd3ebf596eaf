"""What a registered component declares: the keyword arguments of `zoo.core.registry.register` besides
`check`, stored as one frozen `Declaration` (an unknown key is an error at registration).

    @register("loss", "entropy_bonus", reads=("entropy",), grad=("entropy",))

One vocabulary says what a component needs: the fields it **reads** (zoo/core/fields.py). What some
component of the variant reads decides what the step computes: the critic is built and run when a
component reads `values`, the reference model when one reads `logp_ref`, the old log-probs when one
reads `logp_old` (or a later optimizer step needs them).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Declaration:
    """A component's declarations (every key optional).

    reads:    fields the component reads (zoo/core/fields.py); a declared read is data, never a
              hyperparameter: a clip rule or stage gets each rollout field it reads as a keyword.
    writes:   fields a `stage` writes into `Batch.extras` (or a Batch field it fills).
    grad:     read fields whose gradient it needs (the entropy bonus: `entropy`).
    stats:    token stats it returns (`TermResult.token_stats` / `ClipResult.token_stats`), logged.
    selects:  it picks tokens over the whole optimizer step: it gets keyword `step` (a StepView).
    aggregate: a loss term's own aggregation rule (a registered `aggregate` name), else the variant's.
    level:    "token" or "sequence": what an advantage estimator or clip rule works on.
    needs_groups: it compares the completions of a prompt (group_size >= 2).
    sets:     a controller's targets, "term.hyperparameter" (adaptive_kl: "kl.beta").
    single_update: a clip rule's note for `zoo validate` when one update makes every ratio 1.
    reads_metric: a filter / length component whose `metric` names a reward metric (checked).
    reads_column: a loss term whose `column` names a reward column (checked).
    discrete: a reward's scores take few values (True) or are continuous (False); None: unknown.
    accuracy: a reward that judges correctness (its 1.0 is `accuracy`).
    session:  a reward's stateful scorer class (zoo/rewards/session.py).
    after:    a stage's place in the step: "reward", "forwards" or "advantage" (zoo/core/stages.py POSITIONS).
    """

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    grad: tuple[str, ...] = ()
    stats: tuple[str, ...] = ()
    selects: bool = False
    aggregate: str | None = None
    level: str | None = None
    needs_groups: bool = False
    sets: tuple[str, ...] = ()
    single_update: str | None = None
    reads_metric: bool = False
    reads_column: bool = False
    discrete: bool | None = None
    accuracy: bool = False
    session: Any = None
    after: str | None = None


KEYS = tuple(f.name for f in dataclasses.fields(Declaration))
_TUPLES = ("reads", "writes", "grad", "stats", "sets")
NONE = Declaration()


def declare(where: str, meta: Mapping[str, Any]) -> Declaration:
    """`meta` (register's keyword arguments) -> a Declaration. Raises ValueError naming `where`, the
    unknown key, a did-you-mean and the allowed keys; a string given where a tuple of names is expected
    (`reads="logp"`) is one name."""
    unknown = [k for k in meta if k not in KEYS]
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, KEYS, n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(f"{where}: unknown declaration {', '.join(hints)}; allowed: {', '.join(KEYS)}")
    vals = {k: ((v,) if isinstance(v, str) else tuple(v)) if k in _TUPLES else v for k, v in meta.items()}
    return Declaration(**vals)


def of(component: Any) -> Declaration:
    """The declaration of a built component, or NONE for a plain function put in a slot by hand."""
    return getattr(component, "decl", NONE)
