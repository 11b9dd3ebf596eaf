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
