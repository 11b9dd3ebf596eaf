"""The fields a component may read, when they exist, and what produces them (issue 9, Part 4).

A component declares what it reads: `@register("loss", "entropy_bonus", reads=("entropy",))`. Two
kinds of field:

- rollout-time, on the Batch before the update: `objectives [N, K]`, `scores [N]`, `logp_old`,
  `logp_ref`, `logp_rollout`, `values`, `advantages`, `token_rewards`, `kl_reward` (all `[N, T]`),
  and the masks and ids the contracts always pass;
- update-time, computed in each forward of the update: `logp`, `entropy` (`[n, T]`), and the clip
  rule's flags `clip_low`, `clip_high`, `ratio`.

The step computes an optional field only when some component of the variant reads it (old and
reference log-probs, values, the entropy's gradient), and `zoo validate` rejects a variant whose
component reads a field nothing produces (`unproduced_reads`), naming the component, the field and
what could produce it.
"""
from __future__ import annotations

from typing import Any, Iterable

ROLLOUT = ("objectives", "scores", "logp_old", "logp_ref", "logp_rollout", "values", "advantages",
           "token_rewards", "kl_reward", "mask", "group_ids", "lengths", "truncated")
UPDATE = ("logp", "entropy", "clip_low", "clip_high", "ratio", "counts")
#: what each contract passes besides the fields above (positional data of a kind, zoo/kinds.py)
CONTRACT = ("loss", "old_values", "returns", "metrics", "completions", "rows", "max_new_tokens", "adv")

#: fields that exist only when something produces them: field -> (is it produced?, what would produce it)
OPTIONAL: dict[str, tuple[Any, str]] = {
    "values": (lambda slots: slots.get("critic") is not None, "a critic (slots.critic, e.g. clipped_value)"),
}


def declared_reads(component: Any) -> tuple[str, ...]:
    """The fields `component` (a registry Component) declares it reads: `reads=` in its
    registration, plus `values` for the older `needs_values=True`."""
    reads = tuple(component.meta.get("reads", ()))
    return reads + (("values",) if component.meta.get("needs_values") and "values" not in reads else ())


def unproduced_reads(components: Iterable[tuple[str, Any]], slots: dict[str, Any]) -> list[str]:
    """Errors for every (slot, component) that reads a field no part of the variant produces, or a
    field zoo does not know. slots: the variant's built components by slot (for the producers)."""
    known = set(ROLLOUT) | set(UPDATE) | set(CONTRACT)
    errors = []
    for slot, comp in components:
        for f in declared_reads(comp):
            if f not in known:
                errors.append(f"{slot} {comp.name!r} reads {f!r}, which is no field of the step; "
                              f"known: {', '.join(ROLLOUT + UPDATE)}")
            elif f in OPTIONAL and not OPTIONAL[f][0](slots):
                errors.append(f"{slot} {comp.name!r} reads {f!r}, which nothing in this variant produces: "
                              f"it needs {OPTIONAL[f][1]}")
    return errors
