"""verl's bypass mode as a clip rule (kind "clip"): any token-level clip rule evaluated against the
sampler's log-probs instead of the trainer's rollout-time forward.

    clip: {name: bypass, rule: {name: ppo, eps: 0.2}}    # PPO-clip on r = pi / pi_rollout
    clip: {name: bypass, rule: none}                      # REINFORCE, -r A with r = pi / pi_rollout

verl's `rollout_correction.bypass_mode=True` sets old_log_prob := rollout_log_probs, so its policy
loss anchors at the sampler (verl docs "Rollout Correction", bypass mode; its DPPO recipe uses it,
arXiv 2602.04879 §5.2). Here the anchor is a wrapper: the inner rule is called with logp_rollout in
logp_old's place, so every ratio it forms is pi / pi_rollout, which also carries the
training-inference mismatch (with one on-policy update the ratio is not 1 where the sampler
disagrees with the trainer).

What does not compose (refused when built): a rule that selects over the step (`clip_cov`,
`kl_cov`: they read the step view's logp_old, not the anchor), a rule that reads rollout fields
itself (`dppo`, which has its own `anchor: rollout`), and `bypass` inside `bypass`. Corrections
(`tis`, `mis`, `icepop`, `rs`) still read pi_old / pi_rollout, the trainer's own rollout-time
forward, which zoo computes in bypass mode too (verl skips it): a correction on top of `bypass` is
our composition, not verl's bypass-mode IS (which weighs pi_theta / pi_rollout inside the loss).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from torch import Tensor

from zoo.components.stats import check_same_shape
from zoo.core.registry import Component, build, register
from zoo.core.types import ClipResult


def _freeze(spec: Any) -> Any:
    return tuple(sorted((k, _freeze(v)) for k, v in spec.items())) if isinstance(spec, Mapping) else spec


@lru_cache(maxsize=64)
def _inner(frozen: Any) -> Component:
    spec = dict(frozen) if isinstance(frozen, tuple) else frozen
    comp = build("clip", spec)
    d = comp.decl
    if d.selects or d.reads or comp.name == "bypass":
        why = "it selects over the step" if d.selects else f"it reads {', '.join(d.reads)} itself"
        if comp.name == "bypass":
            why = "bypass does not nest"
        raise ValueError(f"clip 'bypass' cannot wrap {comp.name!r}: {why} (docs/reference/components.md, bypass)")
    return comp


def _check_bypass(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    _inner(_freeze(params["rule"]))


@register(
    "clip",
    "bypass",
    check=_check_bypass,
    reads=("logp_rollout",),
    single_update="the ratio is pi / pi_rollout: it acts on the sampler's mismatch",
)
def bypass(
    logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor, *, rule: Any, logp_rollout: Tensor | None = None
) -> ClipResult:
    """The clip rule `rule` (required: a name or {name, ...params}) with logp_rollout as its anchor: its ratio is
    pi / pi_rollout, not pi / pi_old. logp, logp_old, adv, mask, logp_rollout: [N, T] (logp_old is
    not used). Returns the inner rule's ClipResult (its `ratio` is pi / pi_rollout).
    Raises ValueError without logp_rollout, on shapes that differ, or for a rule that does not compose.
    Source: verl rollout correction, bypass mode (old_log_prob = rollout_log_probs)."""
    inner = _inner(_freeze(rule))
    if logp_rollout is None:
        raise ValueError(
            "clip 'bypass' needs the sampler's log-probs (logp_rollout), and this generator does not "
            "report them: use a generator that does (sampling.backend)"
        )
    check_same_shape(logp=logp, logp_rollout=logp_rollout)
    return inner(logp, logp_rollout.to(logp.device, logp.dtype), adv, mask)
