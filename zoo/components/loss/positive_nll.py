"""The positive-example language-model loss of VAPO (Yue et al. 2025, arXiv:2504.05118 §4.3, eq. 9):
the token-mean negative log-likelihood over the completions judged correct, added to the policy
loss with weight mu (L = L_PPO + mu L_NLL, mu = 0.1).

"Correct" is read from one raw reward column: completion i is correct when
objectives[i, column] >= threshold (defaults: column 0, the run's first reward, usually
`correctness`; threshold 1.0, the same rule as zoo's accuracy, score == 1). An unscored row (NaN)
is not correct. The mean is over the correct completions' tokens of the whole optimizer step on
every rank, so it needs the step's view (`selects=True`); it is aggregated with its own rule,
whatever the variant's aggregation.

Shapes: M rows of the optimizer step (all ranks), n rows of a micro-batch, T completion tokens, K
reward columns.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from zoo.components.stats import sanitize
from zoo.core.registry import register
from zoo.core.types import TermInputs, TermResult


def correct_rows(objectives: torch.Tensor, column: int, threshold: float) -> torch.Tensor:
    """[M] bool: objectives[:, column] >= threshold (NaN: False). objectives: [M, K].
    Raises ValueError naming the column and K when the column does not exist."""
    if objectives.dim() != 2 or not 0 <= column < objectives.shape[1]:
        k = objectives.shape[1] if objectives.dim() == 2 else 0
        raise ValueError(
            f"loss term 'nll_positive': column {column} does not exist; the run has {k} reward "
            f"column(s), numbered 0 .. {k - 1} in the order of the run file's `rewards:`"
        )
    return objectives[:, column] >= threshold


def _check(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not float(params["mu"]) >= 0:
        raise ValueError(f"mu must be >= 0, got {params['mu']}")
    if isinstance(params["column"], bool) or not isinstance(params["column"], int) or params["column"] < 0:
        raise ValueError(f"column must be a reward column index >= 0, got {params['column']!r}")
    t = params["threshold"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise ValueError(
            f"threshold must be a finite number (a row is correct when its column's score is >= it), got {t!r}"
        )


@register(
    "loss",
    "nll_positive",
    check=_check,
    reads=("logp", "objectives"),
    selects=True,
    aggregate="token_mean",
    reads_column=True,
)
def nll_positive(inp: TermInputs, *, mu: float = 0.1, column: int = 0, threshold: float = 1.0) -> TermResult:
    """mu * -log pi(o_t) on the tokens of correct completions, scaled so that its `token_mean`
    aggregation (division by the step's real tokens, counts.tokens) gives
        mu * (1 / sum_{i correct} |o_i|) sum_{i correct} sum_t -log pi(o_{i,t})
    over the whole optimizer step (VAPO eq. 9; mu 0.1, §4.3 / §5.1). A step without a correct
    completion contributes 0. inp.logp, inp.mask: [n, t]; inp.step.fields["objectives"]: [M, K].
    Returns TermResult(loss [n, t], 0 on padding). Raises ValueError without reward columns (the
    run has nothing to judge correctness by) or for a column the run does not have."""
    v = inp.step
    if v is None or "objectives" not in v.fields:
        raise ValueError(
            "loss term 'nll_positive' needs the reward columns (objectives) of the step to judge "
            "which completions are correct; the run has none"
        )
    correct = correct_rows(v.fields["objectives"], column, threshold)  # [M]
    real = v.fields["mask"].bool()  # [M, T]
    positive = real & correct[:, None]
    n_pos = float(positive.sum())
    if n_pos == 0:
        return TermResult(torch.zeros_like(inp.logp))
    weight = v.local(positive.float(), like=inp.logp) * (inp.counts.tokens / n_pos)  # [n, t]
    return TermResult(sanitize(-mu * weight * inp.logp, inp.mask))
