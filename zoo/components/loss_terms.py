"""Loss terms (kind "loss", slot `loss`, a list): extra per-token losses added to the clip rule's.

A term is `fn(inp: TermInputs) -> TermResult(loss [n, T], token_stats)`; its hyperparameters are
keyword-only. The update adds each term's per-token loss to the policy term and aggregates the sum
with the variant's aggregation over the whole optimizer step, unless the term declares its own
(`@register("loss", name, aggregate="token_mean")`: then it is aggregated alone with that rule and
added). A term declares what it reads (`reads=`), so the step computes those fields only when some
term needs them, and `grad=("entropy",)` when it needs the entropy's gradient.

The `kl` term is not written by hand: the `kl:` slot with `placement: loss` becomes it
(`zoo.config.desugar.kl_parts`). Controllers (e.g. `adaptive_kl`) set a term's coefficient per step by
name: the update calls the term with the controller's value for that hyperparameter.
"""

from __future__ import annotations

from zoo.components.kl import masked_kl
from zoo.components.stats import sanitize
from zoo.core import registry
from zoo.core.registry import register
from zoo.core.types import TermInputs, TermResult


@register("loss", "kl", reads=("logp", "logp_ref"), stats=("kl/ref",))
def kl(inp: TermInputs, *, estimator: str = "k3", beta: float = 0.0) -> TermResult:
    """beta * k(logp, logp_ref) per token, the KL to the reference in the loss (GRPO arXiv:2402.03300
    eq. 3-4: k3, beta 0.04). inp.logp, inp.logp_ref, inp.mask: [n, T]. Logs kl/ref (the token mean
    of k). Made from the `kl:` slot (placement loss); writing it by hand is a validation error.
    Raises ValueError when logp_ref is missing or shapes differ; ComponentError for an unknown
    estimator."""
    if inp.logp_ref is None:
        raise ValueError("loss term 'kl' needs reference log-probs (logp_ref): the variant has no reference")
    k = masked_kl(registry.build("kl_estimator", estimator), inp.logp, inp.logp_ref, inp.mask)  # [n, T], padding 0
    return TermResult(sanitize(beta * k, inp.mask), {"kl/ref": k.detach()})


@register("loss", "entropy_bonus", reads=("entropy",), grad=("entropy",))
def entropy_bonus(inp: TermInputs, *, coef: float = 0.0) -> TermResult:
    """-coef * H_t per token: the entropy bonus of PPO (Schulman et al. arXiv:1707.06347 eq. 9,
    c2 S[pi](s_t)), aggregated like the policy term. inp.entropy, inp.mask: [n, T].
    Raises ValueError when the entropy was not computed."""
    if inp.entropy is None:
        raise ValueError("loss term 'entropy_bonus' needs the entropy")
    return TermResult(-coef * sanitize(inp.entropy, inp.mask))
