"""Loss terms (kind "loss", slot `loss`, a list): extra per-token losses added to the clip rule's; here
the contract and the terms `kl` and `entropy_bonus`.

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

from zoo.components.clip.surrogate import LOG_RATIO_CLAMP
from zoo.components.kl import masked_kl
from zoo.components.stats import sanitize
from zoo.core import registry
from zoo.core.registry import register
from zoo.core.types import TermInputs, TermResult


@register("loss", "kl", reads=("logp", "logp_ref"), stats=("kl/ref",))
def kl(inp: TermInputs, *, estimator: str = "k3", beta: float = 0.0, bias_correction: bool = False) -> TermResult:
    """beta * k(logp, logp_ref) per token, the KL to the reference in the loss (GRPO arXiv:2402.03300
    eq. 3-4: k3, beta 0.04). inp.logp, inp.logp_ref, inp.mask: [n, T]. Logs kl/ref (the token mean
    of k, uncorrected). Made from the `kl:` slot (placement loss); writing it by hand is a validation
    error. `bias_correction` (kl.bias_correction): beta * r_t * k_t with r_t = pi_theta / pi_old =
    exp(logp - logp_old), not detached, so the gradient also flows through r (TRL
    `use_bias_correction_kl`, off by default there; DeepSeek-V3.2 arXiv:2512.02556 §3.1, the KL
    estimate under samples from pi_old). With one on-policy update r = 1 but its gradient is not 0:
    the term's gradient is beta (k' + k), as in TRL. Raises ValueError when logp_ref is missing or
    shapes differ; ComponentError for an unknown estimator."""
    if inp.logp_ref is None:
        raise ValueError("loss term 'kl' needs reference log-probs (logp_ref): the variant has no reference")
    k = masked_kl(registry.build("kl_estimator", estimator), inp.logp, inp.logp_ref, inp.mask)  # [n, T], padding 0
    value = k
    if bias_correction:
        lr = sanitize(inp.logp, inp.mask) - sanitize(inp.logp_old.detach(), inp.mask)
        value = lr.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp() * k  # [n, T], padding 0 (k is)
    return TermResult(sanitize(beta * value, inp.mask), {"kl/ref": k.detach()})


@register("loss", "entropy_bonus", reads=("entropy",), grad=("entropy",))
def entropy_bonus(inp: TermInputs, *, coef: float = 0.0) -> TermResult:
    """-coef * H_t per token: the entropy bonus of PPO (Schulman et al. arXiv:1707.06347 eq. 9,
    c2 S[pi](s_t)), aggregated like the policy term. inp.entropy, inp.mask: [n, T].
    Raises ValueError when the entropy was not computed."""
    if inp.entropy is None:
        raise ValueError("loss term 'entropy_bonus' needs the entropy")
    return TermResult(-coef * sanitize(inp.entropy, inp.mask))
