"""Chat prompts: optional system message, few-shot worked turns, then the question with the instruction.

build_prompt("Calculate 2 + 3.", fewshot=[{"question": "Calculate 1 + 1.", "answer": "2"}])
-> [{"role": "user", "content": "Calculate 1 + 1.\\nPut your final answer within \\\\boxed{}."},
    {"role": "assistant", "content": "The answer is \\\\boxed{2}."},
    {"role": "user", "content": "Calculate 2 + 3.\\nPut your final answer within \\\\boxed{}."}]
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from zoo.tasks.base import TaskError

DEFAULT_INSTRUCTION = "Put your final answer within \\boxed{}."
# `{answer}` is replaced by the gold answer, and `{key}` by any other field of the example (for
# reasoning_gym: its metadata, e.g. `{expression}`); plain str.replace, so other braces stay as written.
DEFAULT_FEWSHOT_ANSWER = "The answer is \\boxed{{answer}}."


def user_content(question: str, instruction: str | None) -> str:
    """The question followed by the instruction on a new line (no instruction when empty/None)."""
    return f"{question}\n{instruction}" if instruction else str(question)


def assistant_content(example: Mapping[str, Any] | str, template: str = DEFAULT_FEWSHOT_ANSWER) -> str:
    """A worked answer turn: the answer verbatim if it already contains `\\boxed`, else the template
    with `{answer}` and every other `{key}` of the example filled in, e.g.
    "{expression} = {answer}. The answer is \\boxed{{answer}}." -> "3 + 4 = 7. The answer is \\boxed{7}."."""
    ex = {"answer": example} if isinstance(example, str) else example
    answer = str(ex["answer"])
    if "\\boxed" in answer:
        return answer
    out = template
    for k, v in ex.items():
        if k != "question" and isinstance(v, (str, int, float)):
            out = out.replace("{" + str(k) + "}", str(v))
    return out


def build_prompt(
    question: str,
    *,
    fewshot: Sequence[Mapping[str, str]] = (),
    system: str | None = None,
    instruction: str | None = DEFAULT_INSTRUCTION,
    fewshot_answer: str = DEFAULT_FEWSHOT_ANSWER,
) -> list[dict[str, str]]:
    """Chat messages for one question: [system], (user, assistant) per few-shot example, user."""
    msgs: list[dict[str, str]] = []
    if system:
        msgs.append({"role": "system", "content": str(system)})
    for ex in fewshot:
        msgs.append({"role": "user", "content": user_content(ex["question"], instruction)})
        msgs.append({"role": "assistant", "content": assistant_content(ex, fewshot_answer)})
    msgs.append({"role": "user", "content": user_content(question, instruction)})
    return msgs


def check_fewshot(value: Any) -> None:
    """Raise TaskError unless `value` is an int >= 0 or a list of {question, answer} mappings."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise TaskError(f"task key 'fewshot' must be >= 0, got {value}")
        return
    if isinstance(value, (list, tuple)):
        for i, ex in enumerate(value):
            if not isinstance(ex, Mapping) or "question" not in ex or "answer" not in ex:
                raise TaskError(f"fewshot example {i} must be a mapping with 'question' and 'answer', got {ex!r}")
        return
    raise TaskError(f"task key 'fewshot' must be a count or a list of {{question, answer}}, got {value!r}")


def given_fewshot(value: Any) -> list[dict[str, str]]:
    """The user's own examples as {question, answer} str dicts ([] when `value` is a count)."""
    if isinstance(value, (list, tuple)):
        return [{"question": str(ex["question"]), "answer": str(ex["answer"])} for ex in value]
    return []


def finish_rows(
    rows: list[dict[str, Any]], fewshot: Sequence[Mapping[str, str]], spec: Mapping[str, Any], split: str
) -> list[dict[str, Any]]:
    """Add `prompt` to each row (few-shot, system, instruction from the spec) and a stable `id`."""
    for i, row in enumerate(rows):
        row["prompt"] = build_prompt(
            row["question"],
            fewshot=fewshot,
            system=spec.get("system"),
            instruction=spec.get("instruction"),
            fewshot_answer=spec.get("fewshot_answer") or DEFAULT_FEWSHOT_ANSWER,
        )
        row["id"] = f"{row['source']}/{split}/{i}"
    return rows
