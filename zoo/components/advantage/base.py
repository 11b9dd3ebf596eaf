"""Advantage estimators: `fn(inp: AdvantageInputs) -> AdvantageResult` (kind "advantage").

Every estimator returns advantages [N, T] that are 0 on padding and NaN on the real tokens of a row
whose score is NaN (the engine zeroes those rows after normalisation); a NaN score never reaches
another row. Padded slots of kl_reward and values are selected away with `torch.where` before any
arithmetic, so NaN/inf there reach nothing (cases C7, C8). Outcome scores go on the last *real* token
of each row, not the last column (case C14).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import Tensor

from zoo.components.stats import as_bool, group_constant, group_stats, masked_sum, sanitize
from zoo.core.registry import register
from zoo.core.types import AdvantageInputs, AdvantageResult


def _check_unit(*names: str):
    """A `check` that requires each named hyperparameter to lie in [0, 1]."""

    def check(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
        for name in names:
            v = params[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")

    return check


def _validate(inp: AdvantageInputs) -> None:
    """Raise ValueError unless the fields of `inp` have the shapes of the contract."""
    if inp.mask.dim() != 2:
        raise ValueError(f"mask must be [N, T], got {tuple(inp.mask.shape)}")
    n = inp.mask.shape[0]
    for name in ("scores", "group_ids"):
        t = getattr(inp, name)
        if tuple(t.shape) != (n,):
            raise ValueError(f"{name} must be [N] = [{n}], got {tuple(t.shape)}")
    for name in ("kl_reward", "values"):
        t = getattr(inp, name)
        if t is not None and t.shape != inp.mask.shape:
            raise ValueError(f"{name} must be [N, T] = {tuple(inp.mask.shape)}, got {tuple(t.shape)}")


def _dtype(inp: AdvantageInputs) -> torch.dtype:
    return torch.promote_types(torch.promote_types(inp.scores.dtype, inp.kl_reward.dtype), torch.float32)


def _finish(adv: Tensor, inp: AdvantageInputs) -> Tensor:
    """adv [N, T] -> 0 on padding, NaN on every real token of a NaN-score row (whatever gamma is)."""
    mask = as_bool(inp.mask)  # [N, T]
    nan_row = torch.isnan(inp.scores)[:, None] & mask  # [N, T]
    return torch.where(nan_row, torch.full_like(adv, float("nan")), sanitize(adv, mask))


def _discounted_cumsum(x: Tensor, discount: float | Tensor) -> Tensor:
    """out_t = sum_{l >= 0} discount^l x_{t+l} along the last dim. x: [N, T] -> [N, T]; discount a
    float or one per row [N]."""
    out = torch.empty_like(x)  # [N, T]
    running = torch.zeros_like(x[:, 0])  # [N]
    for t in range(x.shape[1] - 1, -1, -1):
        running = x[:, t] + discount * running
        out[:, t] = running
    return out


def token_rewards(inp: AdvantageInputs) -> Tensor:
    """Per-token rewards: kl_reward on real tokens plus the score on the last real token of each row.

    inp.scores [N], inp.mask [N, T], inp.kl_reward [N, T]. Returns [N, T], 0 on padding. The last
    real token is the last True slot of the mask (= mask.sum - 1 for a right-padded mask), never the
    last column; a row with no real token gets no score. Source: lm-human-preferences
    `compute_rewards` (Ziegler et al. arXiv 1909.08593), with the score moved off the padding.
    Raises ValueError on shapes that break the contract.
    """
    _validate(inp)
    mask = as_bool(inp.mask)  # [N, T]
    dtype = _dtype(inp)
    cols = torch.arange(mask.shape[1], device=mask.device)[None, :]  # [1, T]
    last = torch.where(mask, cols, torch.full_like(cols, -1)).amax(dim=1, keepdim=True)  # [N, 1]
    at_last = (cols == last) & mask  # [N, T]
    score = inp.scores.to(dtype)[:, None].expand(mask.shape)  # [N, T]
    kl = sanitize(inp.kl_reward.to(dtype), mask)  # [N, T]
    return kl + torch.where(at_last, score, torch.zeros_like(score))


def reward_to_go(token_rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Discounted reward-to-go G_t = sum_{l >= 0} gamma^l r_{t+l} over real tokens.

    token_rewards: [N, T]; mask: [N, T] bool/0-1, True on real tokens (right-padded). Padded slots are
    selected away before the sum, so whatever they hold never leaks (case C8). Returns [N, T], 0 on
    padding. Source: REINFORCE (Williams 1992); REINFORCE++ arXiv 2501.03262 eq. 9.
    Raises ValueError if the shapes differ or gamma is outside [0, 1].
    """
    if token_rewards.shape != mask.shape or mask.dim() != 2:
        raise ValueError(f"token_rewards {tuple(token_rewards.shape)} and mask {tuple(mask.shape)} must both be [N, T]")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    r = sanitize(token_rewards, mask)  # [N, T]
    return sanitize(_discounted_cumsum(r, gamma), mask)


def _check_gae(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    """gamma, lam (and critic_lam when set) in [0, 1]; length_alpha, when set, a number > 0."""
    _check_unit("gamma", "lam")(params, context)
    if params["critic_lam"] is not None:
        _check_unit("critic_lam")(params, context)
    a = params["length_alpha"]
    if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float)) or not a > 0):
        raise ValueError(f"length_alpha must be a number > 0 (VAPO: 0.05) or null, got {a!r}")


def length_adaptive_lambda(lengths: Tensor, alpha: float) -> Tensor:
    """VAPO's length-adaptive GAE lambda: lam = 1 - 1 / (alpha * l), clamped to [0, 1] (it is
    negative for l < 1 / alpha, and a row with l = 0 gets 0). lengths: [N] real tokens per row.
    Returns [N] float64. Source: VAPO arXiv 2504.05118 §4.2 (alpha = 0.05)."""
    lf = lengths.double()
    lam = 1.0 - 1.0 / (alpha * lf.clamp(min=1e-12))
    return torch.where(lf > 0, lam.clamp(0.0, 1.0), torch.zeros_like(lf))


@register("advantage", "gae", check=_check_gae, reads=("values",), level="token")
def gae(
    inp: AdvantageInputs,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
    critic_lam: float | None = None,
    length_alpha: float | None = None,
) -> AdvantageResult:
    """Generalised advantage estimation with a critic.

    Token rewards r_t = kl_reward_t + score on the last real token; delta_t = r_t + gamma V_{t+1} - V_t
    with V = 0 after the last real token; A_t = sum_l (gamma lam)^l delta_{t+l} (the actor's
    advantages); returns = A^{critic_lam} + V, the same sum with critic_lam (the critic's targets).
    Decoupled lambda (VAPO §4.1): critic_lam None -> lam (one lambda, the classic GAE); VAPO uses
    critic_lam 1.0 (unbiased Monte-Carlo value targets). Length-adaptive lambda (VAPO §4.2):
    length_alpha None -> the fixed lam; else each row's actor lambda is
    clamp(1 - 1 / (length_alpha * l), 0, 1), l = the row's real tokens (`length_adaptive_lambda`),
    and `lam` is not used for the advantages.
    inp.values [N, T] is required; padded slots of values and kl_reward are selected away first.
    Returns advantages [N, T] and returns [N, T] (0 on padding; NaN on the real tokens of a
    NaN-score row, in both). Case C14. Source: GAE arXiv 1506.02438 eq. 16; lm-human-preferences;
    VAPO arXiv 2504.05118 §4.1 (decoupled GAE), §4.2 (length-adaptive GAE).
    Raises ValueError when inp.values is None or shapes break the contract.
    """
    if inp.values is None:
        raise ValueError("gae needs critic values: AdvantageInputs.values is None")
    r = token_rewards(inp)  # [N, T]
    mask = as_bool(inp.mask)  # [N, T]
    v = sanitize(inp.values.to(r.dtype), mask)  # [N, T]
    v_next = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)  # [N, T]; 0 past the last real
    delta = r + gamma * v_next - v  # [N, T]
    if length_alpha is None:
        actor_discount: float | Tensor = gamma * lam
    else:
        actor_discount = gamma * length_adaptive_lambda(mask.sum(1), length_alpha).to(r.dtype)  # [N]
    adv = _finish(_discounted_cumsum(delta, actor_discount), inp)  # [N, T]
    if critic_lam is None and length_alpha is None:
        critic_adv = adv  # one lambda: today's GAE
    else:
        critic_adv = _finish(_discounted_cumsum(delta, gamma * (lam if critic_lam is None else critic_lam)), inp)
    return AdvantageResult(adv, _finish(critic_adv + v, inp))


def _reward_to_go_advantage(inp: AdvantageInputs, gamma: float) -> AdvantageResult:
    return AdvantageResult(_finish(reward_to_go(token_rewards(inp), inp.mask, gamma), inp), None)


@register("advantage", "reinforce", check=_check_unit("gamma"), level="token")
def reinforce(inp: AdvantageInputs, *, gamma: float = 1.0) -> AdvantageResult:
    """REINFORCE without a baseline: A_t = reward-to-go of the token rewards (kl_reward + score on
    the last real token). inp.scores [N], inp.mask [N, T], inp.kl_reward [N, T].
    Returns advantages [N, T] (0 on padding), returns None. Case C8.
    Source: Williams 1992; as the critic-free estimator of REINFORCE++ arXiv 2501.03262 eq. 9.
    Raises ValueError on shapes that break the contract.
    """
    return _reward_to_go_advantage(inp, gamma)


@register("advantage", "reinforce_pp", check=_check_unit("gamma"), level="token", reads=("kl_reward",))
def reinforce_pp(inp: AdvantageInputs, *, gamma: float = 1.0) -> AdvantageResult:
    """REINFORCE++: A_t = score - beta sum_{i >= t} KL(i), the KL-shaped reward-to-go (with
    kl_reward = -beta KL(i), k1 of old vs ref, placed in the reward: it declares reads=("kl_reward",)).
    inp.scores [N], inp.mask [N, T], inp.kl_reward [N, T]. Returns advantages [N, T] (0 on padding),
    returns None. The global batch normalisation is the `batch_std` normalizer, not done here.
    Source: REINFORCE++ arXiv 2501.03262 eq. 9. Raises ValueError on shapes that break the contract.
    """
    return _reward_to_go_advantage(inp, gamma)


def sequence_scores(inp: AdvantageInputs) -> Tensor:
    """One reward per completion: score + sum of kl_reward over its real tokens (KL in the reward,
    summed over the sequence before any baseline). inp.scores [N], inp.mask [N, T],
    inp.kl_reward [N, T]. Returns [N] (NaN where the score is NaN). Source: RLOO arXiv 2402.14740
    §3 (R = r - beta log(pi/pi_ref) at sequence level). Raises ValueError on bad shapes."""
    _validate(inp)
    dtype = _dtype(inp)
    return inp.scores.to(dtype) + masked_sum(inp.kl_reward.to(dtype), inp.mask, dim=1)  # [N]


def _group_centred(inp: AdvantageInputs, leave_one_out: bool) -> AdvantageResult:
    s = sequence_scores(inp)  # [N]
    mean, _, count = group_stats(s, inp.group_ids)  # [N] each
    adv = s - mean  # [N]
    if leave_one_out:
        adv = adv * count / (count - 1).clamp(min=1)  # s_i - mean of the other valid members
    adv = torch.where(group_constant(s, inp.group_ids) & ~torch.isnan(s), torch.zeros_like(adv), adv)
    mask = as_bool(inp.mask)  # [N, T]
    return AdvantageResult(sanitize(adv[:, None].expand(mask.shape), mask), None)  # [N, T]


@register("advantage", "group_mean", level="sequence", needs_groups=True)
def group_mean(inp: AdvantageInputs) -> AdvantageResult:
    """Group-mean baseline: A_i = s_i - mean_j s_j over the valid members of i's group, with
    s = score + per-row sum of kl_reward; broadcast over i's real tokens.

    inp.scores [N], inp.mask [N, T], inp.group_ids [N], inp.kl_reward [N, T]. Returns advantages
    [N, T] (0 on padding; NaN on a NaN-score row, which is left out of its group's mean; exactly 0
    for a group whose valid scores are all equal or that has one valid member), returns None.
    Source: GRPO arXiv 2402.03300 §4.1.2 (outcome supervision, before the std division);
    Dr. GRPO arXiv 2503.20783. Raises ValueError on shapes that break the contract.
    """
    return _group_centred(inp, leave_one_out=False)


@register("advantage", "rloo", level="sequence", needs_groups=True)
def rloo(inp: AdvantageInputs) -> AdvantageResult:
    """REINFORCE leave-one-out: A_i = s_i - mean of the *other* valid members of i's group
    (= G/(G-1) (s_i - group mean), G = valid members), s = score + per-row sum of kl_reward;
    broadcast over i's real tokens.

    inp.scores [N], inp.mask [N, T], inp.group_ids [N], inp.kl_reward [N, T]. Returns advantages
    [N, T] (0 on padding; NaN on a NaN-score row; 0 for a group with a single valid member),
    returns None. Source: RLOO arXiv 2402.14740 §3; Dr. GRPO arXiv 2503.20783 App. A.
    Raises ValueError on shapes that break the contract.
    """
    return _group_centred(inp, leave_one_out=True)
