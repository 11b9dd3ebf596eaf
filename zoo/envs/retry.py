"""The `retry` environment: after a final answer that the task's own scorer does not accept (the
`correctness` reward: reasoning_gym's `score_answer`, or math-verify), the environment says so and
the model tries again, up to `task.env.max_turns` turns. The reward scores the final answer (`texts`
is the last assistant turn). No tool: it measures and trains self-correction after feedback.
"""

from __future__ import annotations

from typing import Any, Mapping

from zoo.core.registry import register
from zoo.rewards.builtin import correctness
from zoo.rewards.extract import FALLBACKS


class Retry:
    """`zoo.envs.base.Env`: the state is the row (its gold answer); turns end at EOS."""

    stop = ()

    def __init__(self, message: str, fallback: str) -> None:
        self.message, self.fallback = message, fallback

    def reset(self, row: Mapping[str, Any], seed: int, /) -> tuple[list[dict], Any]:
        prompt = row["prompt"]
        if isinstance(prompt, str) or not prompt:
            raise ValueError("retry needs chat prompts (a list of messages), got a plain string")
        return [dict(m) for m in prompt], row

    def step(self, row: Any, assistant_text: str, /) -> tuple[list[dict] | None, bool, dict]:
        score = correctness([assistant_text], [row], fallback=self.fallback)[0]
        if score is None:  # the gold cannot be scored: nothing to say; the reward leaves the row unscored
            return None, True, {}
        if score == 1.0:
            return None, True, {"solved": 1}
        return [{"role": "user", "content": self.message}], False, {"retries": 1}


def _check(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["fallback"] not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}, got {params['fallback']!r}")


@register("env", "retry", check=_check)
def retry(*, message: str = "That is not right. Try again.", fallback: str = "last_number") -> Retry:
    """Another try after a wrong final answer, judged by the `correctness` reward (same `fallback`);
    the trajectory ends at a correct answer or max_turns. For tasks with a gold answer."""
    return Retry(message, fallback)
