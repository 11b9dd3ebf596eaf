"""The `calculator` environment: the model writes `<calc>12*7</calc>`, the environment answers
`<result>84</result>` from a safe arithmetic evaluator (zoo.envs.arithmetic: numbers and + - * / ( )
only, bounded, never `eval`/`exec`); a malformed or refused call gets `<error>...</error>` and counts
as a tool error. A turn without `<calc>` is the final answer and ends the trajectory.

The format is stated in the last user message and shown in one worked demonstration (a user turn,
the assistant's call, the result, the assistant's answer) inserted just before it, after the task's
own few-shot turns (the model imitates the nearest example most).
"""

from __future__ import annotations

from typing import Any, Mapping

from zoo.core.registry import register
from zoo.envs.arithmetic import CalcError, evaluate, format_number

OPEN, CLOSE = "<calc>", "</calc>"
HINT = (
    f"\nYou may use a calculator: write {OPEN}expression{CLOSE} (numbers and + - * / ( ) only) and "
    "wait for <result>value</result>."
)
DEMO = [
    {"role": "user", "content": "Calculate 12 * 7." + HINT},
    {"role": "assistant", "content": f"{OPEN}12*7{CLOSE}"},
    {"role": "user", "content": "<result>84</result>"},
    {"role": "assistant", "content": "The answer is \\boxed{84}."},
]


def tool_reply(text: str) -> tuple[str | None, bool]:
    """The calculator's answer to an assistant turn -> (reply or None when the turn has no call,
    whether it is an error). The last `<calc>` of the turn is the call."""
    at = text.rfind(OPEN)
    if at < 0:
        return None, False
    body = text[at + len(OPEN) :]
    end = body.find(CLOSE)
    if end < 0:
        return f"<error>no {CLOSE} after {OPEN}: write {OPEN}expression{CLOSE}</error>", True
    try:
        return f"<result>{format_number(evaluate(body[:end]))}</result>", False
    except CalcError as e:
        return f"<error>{e}</error>", True


class Calculator:
    """`zoo.envs.base.Env`: stateless (the state is None); see the module doc."""

    stop = (CLOSE,)

    def __init__(self, role: str = "user", demo: bool = True) -> None:
        self.role, self.demo = role, demo

    def reset(self, row: Mapping[str, Any], seed: int, /) -> tuple[list[dict], Any]:
        prompt = row["prompt"]
        if isinstance(prompt, str) or not prompt:
            raise ValueError("the calculator needs chat prompts (a list of messages), got a plain string")
        msgs = [dict(m) for m in prompt]
        last = msgs[-1]
        msgs[-1] = {**last, "content": str(last["content"]) + HINT}
        demo = [dict(m, role=self.role) if i == 2 else dict(m) for i, m in enumerate(DEMO)] if self.demo else []
        return msgs[:-1] + demo + msgs[-1:], None  # the demonstration is the last worked example

    def step(self, state: Any, assistant_text: str, /) -> tuple[list[dict] | None, bool, dict]:
        reply, error = tool_reply(assistant_text)
        if reply is None:
            return None, True, {}
        return [{"role": self.role, "content": reply}], False, {"tool_calls": 1, "tool_errors": int(error)}


def _check(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    from zoo.envs.contract import ENV_ROLES

    if params["role"] not in ENV_ROLES:
        raise ValueError(
            f"role must be one of {', '.join(ENV_ROLES)} (the tool's replies are never the model's own turn), "
            f"got {params['role']!r}"
        )


@register("env", "calculator", check=_check)
def calculator(*, role: str = "user", demo: bool = True) -> Calculator:
    """Arithmetic tool calls `<calc>expr</calc>` answered as `<result>v</result>` by a safe evaluator
    (numbers, + - * / and parentheses). role: the role of the tool's messages (ChatML templates
    without a `tool` role: "user"). demo: show one worked tool call before the question."""
    return Calculator(role=role, demo=demo)
