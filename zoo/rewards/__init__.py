"""Reward functions (registry kind `reward`) and the code that turns them into objectives.

A reward function: `fn(completions: list[str], rows: list[dict], *, hyperparams) -> list[float | None]`
(rows are task rows, see `zoo.tasks`): one finite float, or None (unscored), per completion;
anything else raises `RewardError`. Register one with `@register("reward", "name")`, or name a user
function by dotted path ("mylab.rewards:fn") whose module is one of the run's `plugins`;
`resolve_reward` handles both.

Built in (zoo.rewards.builtin): `correctness` (reasoning_gym's own scorer, or math-verify),
`format` (regex, default a non-empty \\boxed{}), `length` (characters); bandit arms
(zoo.rewards.bandit): `arm_bernoulli`, `arm_gaussian`; label-free rewards of `zoo tta`
(zoo.rewards.tta): `tta_alignment`, `tta_dispersion`; `reward_model` (a learned reward
model, zoo.rewards.reward_model), a stateful reward: the run sets up its session once and tears it down
(zoo.rewards.session: `open_rewards`, `close_rewards`).
`compute_rewards(fns, completions, rows)` -> `RewardScores(objectives [N, K], n_failed [K])`, NaN
where a reward raised or returned None. Accuracy is score == 1.0 (`correct`, `accuracy`).
A critic started from the reward model (`critic: {init: reward_model}`) is zoo.rewards.critic_init.
"""

from zoo.rewards import (
    bandit,  # noqa: F401  (registers arm_bernoulli, arm_gaussian)
    tta,  # noqa: F401  (registers tta_alignment, tta_dispersion)
)
from zoo.rewards.builtin import BOXED_PATTERN, correctness, format_reward, length
from zoo.rewards.compute import (
    RewardScores,
    accuracy,
    compute_rewards,
    correct,
    resolve_reward,
    resolve_rewards,
)
from zoo.rewards.extract import extract_answer, extract_boxed, last_number
from zoo.rewards.reward_model import reward_model
from zoo.rewards.session import LiveReward, close_rewards, open_rewards

__all__ = [
    "BOXED_PATTERN",
    "LiveReward",
    "RewardScores",
    "accuracy",
    "close_rewards",
    "compute_rewards",
    "correct",
    "correctness",
    "extract_answer",
    "extract_boxed",
    "format_reward",
    "last_number",
    "length",
    "open_rewards",
    "resolve_reward",
    "resolve_rewards",
    "reward_model",
]
