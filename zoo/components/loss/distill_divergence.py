"""Full-vocabulary divergences between a student and a teacher at each position, from their logits
`[..., V]` (the last dim the vocabulary), summed over the vocabulary -> `[...]`.

    forward_kl(s, t)            KL(teacher || student) = sum_v T_v (log T_v - log S_v)   (mode-covering)
    reverse_kl(s, t)            KL(student || teacher) = sum_v S_v (log S_v - log T_v)   (mode-seeking)
    generalized_jsd(s, t, b)    GKD's JSD(beta) (Agarwal et al. arXiv 2306.13649, eq. in §3):
                                beta KL(T || M) + (1 - beta) KL(S || M),  M = beta T + (1 - beta) S

At beta = 0 and 1 the JSD formula itself is 0; it behaves like beta * KL(T || S) near 0 and like
(1 - beta) * KL(S || T) near 1 (GKD §3), and, as TRL's `GKDTrainer.generalized_jsd_loss` does, the
endpoints return those KLs: beta = 0 the forward KL, beta = 1 the reverse KL.
Temperature divides both logits first (GKD and TRL's convention).

The loss term `distill_vocab` (the full-vocabulary option of docs/reference/distillation.md "Distillation")
applies one of them per trained token to the policy's full log-softmax (`logp_vocab`, with gradient, from
the update's forward) and the teacher's (`logp_teacher_vocab`, from a `distill:` variant's teacher), both
computed only because the term reads them (zoo/step/distill_vocab.py). The sampled-token signal is
zoo/step/distill.py.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.components.stats import sanitize
from zoo.core.registry import register
from zoo.core.types import TermInputs, TermResult

DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")


def _logps(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student {tuple(student_logits.shape)} and teacher {tuple(teacher_logits.shape)} differ")
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return s, t


def _kl(logp: Tensor, logq: Tensor) -> Tensor:
    """KL(p || q) over the last dim from log-probs (0 log 0 = 0)."""
    p = logp.exp()
    return torch.where(p > 0, p * (logp - logq), torch.zeros_like(p)).sum(-1)


def forward_kl(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """KL(teacher || student) per position [...] (GKD's beta = 0; supervised KD's objective)."""
    s, t = _logps(student_logits, teacher_logits, temperature)
    return _kl(t, s)


def reverse_kl(student_logits: Tensor, teacher_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """KL(student || teacher) per position [...] (GKD's beta = 1; on-policy distillation's objective)."""
    s, t = _logps(student_logits, teacher_logits, temperature)
    return _kl(s, t)


def generalized_jsd(
    student_logits: Tensor, teacher_logits: Tensor, beta: float = 0.5, temperature: float = 1.0
) -> Tensor:
    """GKD's JSD(beta) per position [...] (module doc); beta in [0, 1]."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return forward_kl(student_logits, teacher_logits, temperature)
    if beta == 1.0:
        return reverse_kl(student_logits, teacher_logits, temperature)
    s, t = _logps(student_logits, teacher_logits, temperature)
    m = torch.logsumexp(torch.stack([t + math.log(beta), s + math.log(1.0 - beta)]), dim=0)  # log M
    return beta * _kl(t, m) + (1.0 - beta) * _kl(s, m)


def _check_vocab(params: dict, context: dict) -> None:
    if params.get("divergence", "reverse_kl") not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {', '.join(DIVERGENCES)}, got {params.get('divergence')!r}")
    if not 0.0 <= float(params.get("beta", 0.5)) <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {params.get('beta')}")


@register(
    "loss",
    "distill_vocab",
    check=_check_vocab,
    reads=("logp_vocab", "logp_teacher_vocab"),
    stats=("distill/vocab",),
)
def distill_vocab(
    inp: TermInputs, *, divergence: str = "reverse_kl", beta: float = 0.5, coef: float = 1.0
) -> TermResult:
    """coef * D(student, teacher) per trained token over the whole vocabulary: D = reverse_kl (SDFT),
    forward_kl, or jsd with GKD's `beta` (arXiv 2306.13649). Reads inp.extras["logp_vocab"] [n, T, V]
    (with gradient) and ["logp_teacher_vocab"] [n, >= T, V]. Logs distill/vocab (the token mean of D)."""
    s, t = inp.extras.get("logp_vocab"), inp.extras.get("logp_teacher_vocab")
    if s is None or t is None:
        raise ValueError(
            "loss term 'distill_vocab' needs the policy's and the teacher's full log-probs (a distill: teacher)"
        )
    t = t[:, : s.shape[1]].to(s.device)  # the teacher's [N, T, V] is not trimmed with the micro-batch
    if divergence == "jsd":
        d = generalized_jsd(s, t, beta)
    else:
        d = forward_kl(s, t) if divergence == "forward_kl" else reverse_kl(s, t)
    return TermResult(coef * sanitize(d, inp.mask), {"distill/vocab": d.detach()})
