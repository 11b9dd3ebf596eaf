"""The pieces the clip rules share (ppo.py, soft.py, cov.py, divergence.py, peer.py here), written once:
sanitised inputs and log-ratio, PPO's pessimistic clipped loss with its flags, and packing a ClipResult.

Padded slots of logp, logp_old and adv are *selected away* before any arithmetic, so NaN/inf there
reach neither the loss nor its gradient (case C7). The log-ratio logp - logp_old is clamped to
[-20, 20] before exp, as verl does, so one extreme token cannot overflow.

Source: PPO clip, Schulman et al. arXiv 1707.06347 eq. 7; docs/concepts/cases.md C4, C7.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.components.stats import as_bool, check_same_shape, sanitize
from zoo.core.types import ClipResult

LOG_RATIO_CLAMP = 20.0


def prepare(logp: Tensor, logp_old: Tensor, adv: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sanitised inputs: (mask bool, logp, log_ratio, adv), each [N, T], 0 on padding.

    Padding is replaced by 0 in logp, logp_old and adv *before* the subtraction, so the log-ratio is
    0 (ratio 1) there and no NaN/inf can enter the graph; logp_old and adv are detached.
    Raises ValueError when the shapes differ."""
    check_same_shape(logp=logp, logp_old=logp_old, adv=adv, mask=mask)
    m = as_bool(mask)  # [N, T]
    logp_s = sanitize(logp, m)  # [N, T], gradient flows on real tokens only
    logp_old_s = sanitize(logp_old.detach(), m)  # [N, T]
    adv_s = sanitize(adv.detach(), m)  # [N, T]
    log_ratio = (logp_s - logp_old_s).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [N, T]
    return m, logp_s, log_ratio, adv_s


def clipped_surrogate(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> tuple[Tensor, Tensor, Tensor]:
    """PPO's pessimistic clipped loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A) and its flags.

    ratio, adv: same shape (e.g. [N, T] or [N, 1]). Returns (loss, clip_low, clip_high) of that shape:
    clip_low where A < 0 and r < 1-eps_low, clip_high where A > 0 and r > 1+eps_high, i.e. where the
    clipped branch won and the token's gradient is zero. Source: arXiv 1707.06347 eq. 7."""
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(-ratio * adv, -clipped * adv)
    r = ratio.detach()
    clip_low = (adv < 0) & (r < 1.0 - eps_low)
    clip_high = (adv > 0) & (r > 1.0 + eps_high)
    return loss, clip_low, clip_high


def clip_result(loss: Tensor, clip_low: Tensor, clip_high: Tensor, ratio: Tensor, m: Tensor) -> ClipResult:
    """Pack a ClipResult with loss 0, flags False and ratio 1 on padding (all [N, T]; m bool [N, T])."""
    return ClipResult(
        loss=sanitize(loss, m),
        clip_low=clip_low & m,
        clip_high=clip_high & m,
        ratio=sanitize(ratio.detach(), m, fill=1.0),
    )
