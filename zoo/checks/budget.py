"""The budget against the variant and the processes: minibatches against completions per step, and
prompts per step against the ranks that split them."""

from __future__ import annotations

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad


@check("minibatches", "before_load")
def minibatches(s: BeforeLoad, rep: Report) -> None:
    """`updates.minibatches` <= prompts_per_step x group_size (each minibatch needs a completion)."""
    if s.variant is None:
        return
    ctx = s.context()
    n = s.cfg.budget.prompts_per_step * ctx["group_size"]
    m = ctx["updates"].minibatches
    if m > n:
        rep.errors.append(
            f"budget: updates.minibatches {m} > {n} completions per step "
            "(budget.prompts_per_step x group_size): lower updates.minibatches"
        )


@check("prompts_per_rank", "before_load")
def prompts_per_rank(s: BeforeLoad, rep: Report) -> None:
    """Each rank samples prompts_per_step / world_size prompts: the division must be exact."""
    ws, p = s.world_size, s.cfg.budget.prompts_per_step
    if ws > 1 and p % ws:
        rep.errors.append(
            f"budget.prompts_per_step {p} is not a multiple of the {ws} processes (each rank samples "
            f"prompts_per_step / {ws} prompts): use a multiple of {ws}"
        )


#: completions one rollout step may hold (prompts_per_step x group_size): far above real runs (DAPO's
#: 512 x 16 = 8,192), far below what exhausts a machine's memory in Python rows before any update
MAX_COMPLETIONS = 1_000_000


@check("completions_ceiling", "before_load")
def completions_ceiling(s: BeforeLoad, rep: Report) -> None:
    """prompts_per_step x group_size <= MAX_COMPLETIONS, refused before any model loads (the after_load
    memory estimate needs the model's config and misses the rows' Python objects)."""
    b = s.cfg.budget
    g = s.context()["group_size"] if s.variant is not None else b.group_size
    if g is None:
        return
    n = b.prompts_per_step * g
    if n > MAX_COMPLETIONS:
        knobs = ("budget.group_size", "budget.prompts_per_step")[:: 1 if g >= b.prompts_per_step else -1]
        rep.errors.append(
            f"budget: {b.prompts_per_step} prompts x group_size {g} = {n} completions per step, more than the "
            f"ceiling of {MAX_COMPLETIONS} (zoo.checks.budget.MAX_COMPLETIONS; all are generated and held before "
            f"the step's first update): lower {knobs[0]} or {knobs[1]}"
        )
