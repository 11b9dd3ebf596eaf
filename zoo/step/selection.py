"""The machinery for components that select tokens over the whole optimizer step (docs/concepts/engine.md,
"Selections over the whole step"): before the micro-batch loop of an optimizer step, the update
builds a `StepView` of the step's detached fields over every rank; each micro-batch's component
call then gets the view and its rows in it. `scope: micro` (a hyperparameter of such a component)
gives it a view of the micro-batch alone instead, as verl and TRL select.

Shapes: M rows of the step over all ranks, n rows of a micro-batch, T the step's completion columns.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from zoo.backends.train import strategy
from zoo.core import dist
from zoo.core.batch import Batch
from zoo.core.declarations import of as declared
from zoo.core.fields import BATCH, BY_NAME, declared_reads
from zoo.core.kinds import by_kind
from zoo.core.types import StepView
from zoo.step.forwards import forward_logp, micro_rows
from zoo.step.types import Models, Slots, StepSettings

UPDATE_TIME = ("logp", "entropy")
#: what the clip rule's call passes positionally (logp, logp_old, advantages, mask): never a keyword
CLIP_POSITIONAL = by_kind("clip").reads
ROW_FIELDS = ("scores", "objectives")  # [M] / [M, K]: not padded to T


def selectors(slots: Slots) -> list[Any]:
    """The variant's components registered with `selects=True` (the clip rule, corrections, loss terms)."""
    return [c for c in (slots.clip, *slots.correction, *slots.loss) if declared(c).selects]


def scope(component: Any) -> str:
    """ "step" (default) or "micro": over which rows a selecting component picks its tokens.
    Raises ValueError for anything else."""
    sc = component.resolved().get("scope", "step")
    if sc not in ("step", "micro"):
        raise ValueError(f"{component.kind} {component.name!r}: scope {sc!r}: use step or micro")
    return sc


@torch.no_grad()
def step_fields(sub: Batch, models: Models, slots: Slots, s: StepSettings) -> dict[str, Tensor] | None:
    """The detached fields of the optimizer step's rows `sub` over every rank (a collective), each
    [M, T]; None when no component selects over the whole step. Update-time fields (logp, entropy)
    come from a no-grad forward, only when a selecting component reads them or the old log-probs
    are not on the batch (one on-policy update: then logp_old is that forward's logp)."""
    sel = [c for c in selectors(slots) if scope(c) == "step"]
    if not sel:
        return None
    reads = {f for c in sel for f in declared_reads(c)}
    local = _rollout_fields(sub, reads)
    if reads & set(UPDATE_TIME) or "logp_old" not in local:
        logp, ent = torch.zeros(sub.loss_mask.shape), torch.zeros(sub.loss_mask.shape)
        strategy.gather_weights(models.parallel)  # fsdp: ranks run different numbers of forwards here
        for r in micro_rows(sub, s.micro_batch):
            if not len(r):  # a rank without rows in this optimizer step
                continue
            mb = sub.select(r).trimmed()
            lp, e = forward_logp(models.policy, mb, s, with_entropy=True)
            logp[r, : lp.shape[1]], ent[r, : e.shape[1]] = lp.float().cpu(), e.float().cpu()
        strategy.release_weights(models.parallel)
        local.update(logp=_zero_pad(logp, sub), entropy=_zero_pad(ent, sub))
        local.setdefault("logp_old", local["logp"])  # one on-policy update: pi_old is the policy now
    return _gather(local)


def view(
    fields: dict[str, Tensor] | None,
    component: Any,
    mb: Batch,
    rows: Tensor,
    offset: int,
    update_fields: dict[str, Tensor],
) -> StepView | None:
    """The StepView a selecting `component` gets for micro-batch `mb` (rows `rows` of this rank's
    step, `offset` = this rank's first row in the gathered step); None for other components.
    update_fields: the micro-batch's own detached logp/entropy (for scope micro)."""
    if not declared(component).selects:
        return None
    if scope(component) == "micro" or fields is None:
        local = _rollout_fields(mb, declared_reads(component))
        local.update({k: v.detach().float().cpu() for k, v in update_fields.items()})
        local.setdefault("logp_old", local["logp"])
        return StepView(local, torch.arange(mb.size))
    return StepView(fields, rows + offset)


def clip_kwargs(
    fields: dict[str, Tensor] | None, clip: Any, mb: Batch, rows: Tensor, offset: int, update_fields: dict[str, Tensor]
) -> dict[str, Any]:
    """The keyword arguments of the clip rule's call for micro-batch `mb`: each rollout field the rule
    declares in `reads=` beyond its positional arguments (a Batch field, e.g. dppo's logp_rollout
    [n, T], or a `Batch.extras` key a stage wrote; None when absent), and {"step": its StepView} for
    a rule registered with `selects=True` (e.g. clip_cov); {} for a plain function put in the slot
    by hand (arguments as `view`)."""
    decl = declared(clip)
    kw: dict[str, Any] = {
        f: rollout_field(mb, f) for f in decl.reads if f not in CLIP_POSITIONAL and (f in BATCH or f not in BY_NAME)
    }
    if decl.selects:
        kw["step"] = view(fields, clip, mb, rows, offset, update_fields)
    return kw


def rollout_field(b: Batch, name: str) -> Any:
    """Rollout field `name` of `b`: a Batch attribute (BATCH) or a `Batch.extras` key; None when absent."""
    return getattr(b, name) if name in BATCH else b.extras.get(name)


def rank_offset(n_rows: int) -> int:
    """This rank's first row in the step gathered over ranks (a collective)."""
    sizes = dist.all_gather_object(int(n_rows))
    return sum(sizes[: dist.rank()])


def _rollout_fields(b: Batch, reads: Any = ()) -> dict[str, Tensor]:
    out = {
        "mask": b.loss_mask.cpu(),
        "advantages": b.advantages.detach().float().cpu(),
        "completion_ids": b.completion_ids.cpu(),
    }
    if b.logp_old is not None:
        out["logp_old"] = b.logp_old.detach().float().cpu()
    for f in reads:  # the rollout-time fields a selecting component declares it reads (Batch or extras)
        if f not in out and (f in BATCH or f not in BY_NAME):
            v = rollout_field(b, f)
            if v is not None:
                out[f] = v.detach().float().cpu()
    return out


def _zero_pad(x: Tensor, b: Batch) -> Tensor:
    return torch.where(b.loss_mask.cpu(), x, torch.zeros_like(x))


def _gather(local: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each field concatenated over ranks in rank order (padded to the longest T)."""
    if not dist.is_distributed():
        return local
    parts = dist.all_gather_object(local)
    T = max(int(p["mask"].shape[1]) for p in parts)
    pad = lambda t: torch.nn.functional.pad(t, (0, T - t.shape[1]))  # noqa: E731
    return {k: torch.cat([p[k] if k in ROW_FIELDS or p[k].dim() == 1 else pad(p[k]) for p in parts]) for k in local}
