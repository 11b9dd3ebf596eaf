"""Stages a plugin adds to the step: a registered `stage` writes fields into `Batch.extras` at its
place in the pipeline, and runs when some component of the variant reads a field it writes (the one
vocabulary: what is read decides what the step computes; no variant key turns a stage on).

    @register("stage", "teacher_logp", after="forwards", writes=("teacher_logp",))
    def teacher_logp(batch: Batch) -> dict[str, Tensor]:       # -> {"teacher_logp": [N, T]}
        ...

    @register("loss", "distill", reads=("logp", "teacher_logp"))   # TermInputs.extras["teacher_logp"]
    def distill(inp: TermInputs, *, coef: float = 0.1) -> TermResult: ...

`after=` is one of `POSITIONS`: "reward" (each resampling round's rows, after the reward, length and
objectives stages: objectives [N, K] and scores [N] exist; before the filter),
"forwards" (after the rollout forwards: old / reference log-probs and values exist), "advantage"
(after the advantage and its normalisation, before the update). `zoo validate` checks that every
field a component reads has a producer that runs before it (`order_errors`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Sequence

from zoo.core import fields, registry
from zoo.core.declarations import of as declared

#: where a stage may run, in step order
POSITIONS = ("reward", "forwards", "advantage")
#: the step's stages in order; a stage at position "reward" runs after the objectives (scores exist),
#: before the filter; "forwards" after the forwards; "advantage" after the normalizer
ORDER = (
    "generate",
    "reward",
    "length",
    "objectives",
    "filter",
    "forwards",
    "kl_reward",
    "advantage",
    "normalize",
    "update",
    "controllers",
)
_STAGE_AT = {"reward": 3.5, "forwards": 5.5, "advantage": 8.5}
#: when each kind's components read their fields (a stage: at its position)
READ_AT = {
    "length": "length",
    "objective_norm": "objectives",
    "filter": "filter",
    "kl_estimator": "kl_reward",
    "advantage": "advantage",
    "normalizer": "normalize",
    "clip": "update",
    "loss": "update",
    "correction": "update",
    "critic": "update",
    "aggregate": "update",
    "controller": "controllers",
}


def _at(component: Any) -> float | None:
    """When `component` reads, as an index into ORDER (None: a kind outside the step)."""
    d = declared(component)
    if getattr(component, "kind", None) == "stage":
        return _STAGE_AT.get(d.after or "")
    kind = getattr(component, "kind", None)
    return float(ORDER.index(READ_AT[kind])) if kind in READ_AT else None


def declaration_errors(entry: Any) -> list[str]:
    """What is wrong with a registered stage's declarations: `after` not in POSITIONS, no `writes`,
    or a written field that is one of the step's own (zoo/core/fields.py)."""
    d, where = entry.decl, f"stage {entry.name!r}"
    errors = []
    if d.after not in POSITIONS:
        errors.append(f"{where}: after={d.after!r}; use one of {', '.join(POSITIONS)}")
    if not d.writes:
        errors.append(f"{where}: declares no writes=(...): the fields it puts into Batch.extras")
    own = [f for f in d.writes if f in fields.BY_NAME]
    if own:
        errors.append(f"{where}: writes {', '.join(map(repr, own))}, a field of the step itself; name its own field")
    return errors


def writers() -> dict[str, list[str]]:
    """field -> the registered stages that write it."""
    out: dict[str, list[str]] = {}
    for name in registry.available("stage"):
        for f in registry.get("stage", name).decl.writes:
            out.setdefault(f, []).append(name)
    return out


def active(readers: Iterable[Any]) -> list[registry.Component]:
    """The stages the step runs for `readers` (built components): each registered stage that writes a
    field some reader reads, and the stages those read in turn; built with their default
    hyperparameters, in registration order. Raises ComponentError for a stage whose declarations are
    wrong or a field two stages write."""
    by_field = writers()
    wanted = [f for c in readers for f in declared(c).reads]
    names: list[str] = []
    while wanted:
        f = wanted.pop()
        ws = by_field.get(f, [])
        if len(ws) > 1:
            raise registry.ComponentError(f"field {f!r} is written by stages {', '.join(map(repr, ws))}; one must")
        if ws and ws[0] not in names:
            entry = registry.get("stage", ws[0])
            errors = declaration_errors(entry)
            if errors:
                raise registry.ComponentError("; ".join(errors))
            names.append(ws[0])
            wanted += list(entry.decl.reads)
    order = registry.available("stage")
    return [registry.build("stage", n) for n in sorted(names, key=order.index)]


def order_errors(named: Sequence[tuple[str, Any]], stages: Sequence[Any]) -> list[str]:
    """Errors for every (slot, component) that reads a field whose producer runs at or after the point
    where the component reads it: a stage's `Batch.extras` field, or a step field made later (e.g. a
    stage after `reward` reading `logp_ref`, which the forwards make)."""
    made: dict[str, tuple[float, str]] = {}
    for s in stages:
        for f in declared(s).writes:
            made[f] = (_STAGE_AT[declared(s).after], f"stage {s.name!r} (after {declared(s).after})")
    errors = []
    for slot, c in [*named, *(("stage", s) for s in stages)]:
        at = _at(c)
        if at is None:
            continue
        for f in declared(c).reads:
            spec = fields.BY_NAME.get(f)
            if f in made:
                when, who = made[f]
            elif spec is not None and spec.made_at:
                when, who = float(ORDER.index(spec.made_at)), f"the {spec.made_at} stage"
            else:
                continue
            if when >= at:
                errors.append(
                    f"{slot} {c.name!r} reads {f!r}, but {who} makes it later in the step than "
                    f"{slot} {c.name!r} runs; a stage can run after {', '.join(POSITIONS)}"
                )
    return errors


def run(stages: Sequence[Any], position: str, batch: Any) -> Any:
    """`batch` with the fields the stages at `position` write put into `Batch.extras`, in order.
    Raises ValueError naming the stage when it returns other fields than it declares or a tensor
    without one row per completion."""
    for s in stages:
        if declared(s).after != position:
            continue
        out = s(batch)
        want = set(declared(s).writes)
        if set(out) != want:
            raise ValueError(f"stage {s.name!r} returned {sorted(out)}; it declares writes={sorted(want)}")
        bad = [k for k, v in out.items() if v.shape[0] != batch.size]
        if bad:
            raise ValueError(f"stage {s.name!r}: {', '.join(bad)} must have {batch.size} rows (one per completion)")
        batch = replace(batch, extras={**batch.extras, **out})
    return batch
