"""The fields of the step, in one table: what a component may read, when a field exists, and what
produces it.

A component declares what it reads: `@register("loss", "entropy_bonus", reads=("entropy",))`
(zoo/core/declarations.py). Three kinds of field:

- rollout-time, on the Batch before the update: `objectives [N, K]`, `scores [N]`, `logp_old`,
  `logp_ref`, `logp_rollout`, `values`, `advantages`, `token_rewards`, `kl_reward` (all `[N, T]`),
  and the masks and ids the contracts always pass; plus any field a `stage` writes into
  `Batch.extras` (`writes=`);
- update-time, computed in each forward of the update: `logp`, `entropy` (`[n, T]`), and the clip
  rule's flags `clip_low`, `clip_high`, `ratio`;
- contract: positional data some kind's call always passes (`returns`, `metrics`, ...).

What some component of the variant reads decides what the step computes (old and reference
log-probs, critic values, the entropy's gradient), and `zoo validate` rejects a variant whose
component reads a field nothing produces (`unproduced_reads`), naming the component, the field and
what could produce it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from zoo.core import declarations


@dataclass(frozen=True)
class Field:
    """One field: `when` it exists ("rollout", "update", "contract"), its shape, and, for a field that
    exists only when part of the variant produces it, `produced(slots)` (slots: the variant's built
    components by slot, plus "kl_reward": the KL-in-reward estimator or None) with `producer`, what
    would produce it. `missing` is what an unproduced read is: "error", or "warn" where the field
    still exists with a neutral value (kl_reward: zeros)."""

    name: str
    when: str
    shape: str
    producer: str = ""
    produced: Callable[[Mapping[str, Any]], bool] | None = None
    missing: str = "error"
    on_batch: bool = False  # a `Batch` attribute (a clip rule gets it as a keyword when it reads it)
    made_at: str = (
        ""  # the stage of the step after which it exists (zoo/core/stages.py ORDER); "" update-time, contract
    )


TABLE: tuple[Field, ...] = (
    Field("objectives", "rollout", "[N, K]", on_batch=True, made_at="reward"),
    Field("scores", "rollout", "[N]", on_batch=True, made_at="objectives"),
    Field("logp_old", "rollout", "[N, T]", on_batch=True, made_at="forwards"),
    Field("logp_ref", "rollout", "[N, T]", on_batch=True, made_at="forwards"),
    Field("logp_rollout", "rollout", "[N, T]", on_batch=True, made_at="generate"),
    Field(
        "values",
        "rollout",
        "[N, T]",
        "a critic (slots.critic, e.g. clipped_value)",
        lambda s: s.get("critic") is not None,
        on_batch=True,
        made_at="forwards",
    ),
    Field("advantages", "rollout", "[N, T]", on_batch=True, made_at="advantage"),
    Field("token_rewards", "rollout", "[N, T]", on_batch=True, made_at="objectives"),
    Field(
        "kl_reward",
        "rollout",
        "[N, T]",
        "the KL in the reward (kl.placement: reward)",
        lambda s: s.get("kl_reward") is not None,
        missing="warn",
        on_batch=True,
        made_at="kl_reward",
    ),
    Field("greedy_score", "rollout", "[N]", made_at="objectives"),  # ReMax's baseline (zoo/step/greedy.py)
    Field("otb_energy", "rollout", "[N, T]", made_at="forwards"),  # OTB's 1 - 2 pi + sum pi^2 (zoo/step/forwards.py)
    Field(
        "logp_teacher_vocab", "rollout", "[N, T, V]", made_at="forwards"
    ),  # a distill: teacher, zoo/step/distill_vocab.py
    Field("mask", "rollout", "[N, T]", made_at="generate"),
    Field("group_ids", "rollout", "[N]", made_at="generate"),
    Field("lengths", "rollout", "[N]", made_at="generate"),
    Field("truncated", "rollout", "[N]", made_at="generate"),
    Field("logp", "update", "[n, T]"),
    Field("entropy", "update", "[n, T]"),
    Field("logp_vocab", "update", "[n, T, V]"),  # the policy's full log-softmax, for a full-vocabulary term
    Field("clip_low", "update", "[n, T]"),
    Field("clip_high", "update", "[n, T]"),
    Field("ratio", "update", "[n, T]"),
    Field("counts", "update", "StepCounts"),
    *(
        Field(n, "contract", "")
        for n in ("loss", "old_values", "returns", "metrics", "completions", "rows", "max_new_tokens", "adv")
    ),
)
BY_NAME: dict[str, Field] = {f.name: f for f in TABLE}
ROLLOUT = tuple(f.name for f in TABLE if f.when == "rollout")
UPDATE = tuple(f.name for f in TABLE if f.when == "update")
#: rollout fields that are attributes of `Batch` (the rest of a rollout read is a `Batch.extras` key)
BATCH = tuple(f.name for f in TABLE if f.on_batch)


def declared_reads(component: Any) -> tuple[str, ...]:
    """The fields `component` (a registry Component, or a plain function: none) declares it reads."""
    return declarations.of(component).reads


def unproduced_reads(
    components: Iterable[tuple[str, Any]], slots: Mapping[str, Any], extras: Mapping[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """(errors, warnings) for every (slot, component) that reads a field no part of the variant
    produces, or a field zoo does not know. slots: the variant's built components by slot (for the
    producers; "kl_reward": the KL-in-reward estimator or None). extras: field -> the stage that
    writes it into `Batch.extras` (those are known fields; their order is checked in zoo/core/stages.py)."""
    extras = dict(extras or {})
    errors: list[str] = []
    warnings: list[str] = []
    for slot, comp in components:
        for f in declared_reads(comp):
            spec = BY_NAME.get(f)
            if spec is None and f not in extras:
                errors.append(
                    f"{slot} {comp.name!r} reads {f!r}, which is no field of the step; "
                    f"known: {', '.join(ROLLOUT + UPDATE)} (or a field a stage writes)"
                )
            elif spec is not None and spec.produced is not None and not spec.produced(slots):
                msg = (
                    f"{slot} {comp.name!r} reads {f!r}, which nothing in this variant produces: "
                    f"it needs {spec.producer}"
                )
                (errors if spec.missing == "error" else warnings).append(msg)
    return errors, warnings
