"""Records passed into and out of components (shapes: N completions, T completion tokens)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from torch import Tensor


@dataclass(frozen=True)
class AdvantageInputs:
    """What an advantage estimator sees.

    scores:      [N] float, the scalar outcome score of each completion (objectives already
                 normalised and weighted; NaN = a reward that could not be computed).
    mask:        [N, T] bool, real completion tokens.
    group_ids:   [N] int, which prompt each completion answers (any order, any id values).
    kl_reward:   [N, T] float, per-token reward from KL placement "reward", i.e. -beta * k(logp_old,
                 logp_ref) on real tokens and 0 elsewhere; all zeros when KL is not in the reward.
                 Sequence-level estimators add its per-row sum to the score before the baseline.
    values:      [N, T] float or None, critic values V(s_t) at rollout time (needed by `gae`).
    token_rewards: [N, T] float or None, the rewards per token (outcome rewards: the score on the
                 last real token, 0 elsewhere; the KL in the reward is NOT in it, see kl_reward),
                 for process-reward estimators (declare `reads=("token_rewards",)`).
    objectives:  [N, K] float or None, the raw reward columns (NaN = could not be computed).
    extras:      name -> [N, ...] `Batch.extras`, the fields plugin stages wrote (zoo/core/stages.py).
    """

    scores: Tensor
    mask: Tensor
    group_ids: Tensor
    kl_reward: Tensor
    values: Tensor | None = None
    token_rewards: Tensor | None = None
    objectives: Tensor | None = None
    extras: Mapping[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class AdvantageResult:
    """advantages: [N, T] (0 on padding; NaN on rows whose score is NaN, the engine zeroes them after
    normalisation); returns: [N, T] value targets for a critic, or None."""

    advantages: Tensor
    returns: Tensor | None = None


@dataclass(frozen=True)
class ClipResult:
    """loss: [N, T] per-token policy loss (minus the surrogate), 0 on padding.
    clip_low / clip_high: [N, T] bool, tokens whose ratio was clipped at 1 - eps_low (A < 0) or
    1 + eps_high (A > 0), i.e. where the clip removed the gradient; False on padding.
    ratio: [N, T] detached importance ratio pi/pi_old (1 on padding), for logging.
    token_stats: name -> [N, T] detached values whose token mean over the rollout step is logged
    under that name, for the names the rule declares (`stats=` in its registration), e.g.
    `clip/selected_frac` of clip_cov / kl_cov."""

    loss: Tensor
    clip_low: Tensor
    clip_high: Tensor
    ratio: Tensor
    token_stats: Mapping[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class LengthRows:
    """What a length component knows of the rows besides their lengths (the 4th argument of the
    length kind): group_ids [N] int (which prompt each completion answers) and metrics, name ->
    [N], the per-row metrics of the rewards so far: each raw reward column by its reward's name and
    `accuracy` (1.0 where the correctness-judging reward, registered with `accuracy=True`, gave
    1.0, else 0.0; NaN where unscored), present only when such a reward is in the run."""

    group_ids: Tensor
    metrics: Mapping[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class LengthResult:
    """column: [N] extra objective (e.g. DAPO's soft overlong penalty) or None.
    keep: [N] bool, completions that stay in the loss (False = masked out), or None."""

    column: Tensor | None = None
    keep: Tensor | None = None


@dataclass(frozen=True)
class StepCounts:
    """Totals over one whole optimizer step (all micro-batches, all data-parallel ranks).

    tokens: the loss mask's tokens (the policy's trained tokens, never an environment's); sequences:
    completions; max_new_tokens: the budget of the policy's tokens per completion (Dr. GRPO's constant L). Aggregators divide by these, never by micro-batch counts (C2, C3)."""

    tokens: float
    sequences: float
    max_new_tokens: int

    @staticmethod
    def of(mask: Tensor, max_new_tokens: int | None = None) -> "StepCounts":
        """Counts of a single batch `mask` [N, T] taken as the whole step."""
        m = mask if mask.dtype.is_floating_point else mask.float()
        return StepCounts(
            tokens=float((m != 0).sum()),
            sequences=float(mask.shape[0]),
            max_new_tokens=int(max_new_tokens if max_new_tokens is not None else mask.shape[1]),
        )


@dataclass(frozen=True)
class TermInputs:
    """What a loss term or a correction sees: one micro-batch of n rows in a forward of the update.

    logp:        [n, T] float, the policy's log-probs (with gradient).
    logp_old:    [n, T] float, detached log-probs at rollout time (equal to logp.detach() on the
                 first on-policy update).
    advantages:  [n, T] float, normalised advantages (0 on padding).
    mask:        [n, T] bool, the loss mask (trained tokens).
    counts:      totals of the whole optimizer step (all micro-batches, all ranks).
    entropy:     [n, T] float or None, the policy's per-token entropy (with gradient only when a
                 term declares `grad=("entropy",)`).
    logp_ref:    [n, T] float or None, reference log-probs (None without a reference).
    scores:      [n] float or None, the scalar score of each completion.
    objectives:  [n, K] float or None, the raw reward columns.
    values:      [n, T] float or None, critic values at rollout time.
    token_rewards: [n, T] float or None, rewards per token (outcome score on the last real token).
    logp_rollout: [n, T] float or None, the sampler's log-probs of the drawn tokens (None: the
                 generator does not report them); rollout corrections read it.
    step:        StepView or None: the whole optimizer step's detached fields, for a component that
                 selects tokens over the step (registered with `selects=True`).
    extras:      name -> [n, ...] the micro-batch's `Batch.extras`: fields plugin stages wrote
                 (zoo/core/stages.py), e.g. a teacher's log-probs [n, T].
    """

    logp: Tensor
    logp_old: Tensor
    advantages: Tensor
    mask: Tensor
    counts: StepCounts
    entropy: Tensor | None = None
    logp_ref: Tensor | None = None
    scores: Tensor | None = None
    objectives: Tensor | None = None
    values: Tensor | None = None
    token_rewards: Tensor | None = None
    logp_rollout: Tensor | None = None
    step: "StepView | None" = None
    extras: Mapping[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class StepView:
    """Detached fields of the rows a selection is made over, for components that pick tokens
    (docs/concepts/engine.md, "Selections over the whole step"): with `scope: step` (the default) every row of the
    optimizer step on every rank, so the selection, and the gradient, do not depend on the
    micro-batch split or the number of ranks (C2); with `scope: micro` only the micro-batch's rows
    (what verl and TRL do).

    fields: name -> [M, T] detached (M rows of the view, T the step's completion columns; padding
            0), always `mask`, `advantages`, `completion_ids`, `logp_old`, and the update-time fields the component
            reads (`logp`, `entropy`: from a no-grad forward of the step before its micro-batches),
            and the rollout-time fields it reads (`scores` [M], `objectives` [M, K], `logp_ref`,
            `values`, `token_rewards` [M, T]).
    rows:   [n] long, the micro-batch's rows within the view (use `local`).
    """

    fields: Mapping[str, Tensor]
    rows: Tensor

    def local(self, values: Tensor, like: Tensor) -> Tensor:
        """`values` [M, T] of the view (e.g. a selection computed over it) -> the micro-batch's
        [n, t] slice, t = like.shape[1] (micro-batches are trimmed to their longest row)."""
        return values[self.rows.to(values.device), : like.shape[1]].to(like.device)


@dataclass(frozen=True)
class TermResult:
    """loss: [n, T] per-token loss of a loss term, 0 on padding (it is aggregated like the policy
    term unless the term declares its own aggregation). token_stats: name -> [n, T] detached values
    whose token mean over the rollout step is logged under that name (e.g. "kl/ref")."""

    loss: Tensor
    token_stats: Mapping[str, Tensor] = field(default_factory=dict)
