"""Tasks: prompts with gold answers, split into train / eval with few-shot prefixes.

    task = load_task({"name": "reasoning_gym", "dataset": "basic_arithmetic",
                      "config": EASY_ARITHMETIC, "size": 512, "eval_size": 64, "fewshot": 2})
    task.train[0] -> {"prompt": [chat messages], "question": "Calculate 5 - 3.", "answer": "2",
                      "source": "reasoning_gym:basic_arithmetic", "id": ..., "rg_entry": {...},
                      "rg_spec": {...}}
    stream = PromptStream(task.train, seed=0)

Task kinds (`name`): `reasoning_gym` (zoo.tasks.reasoning_gym), `hf` and `jsonl`
(zoo.tasks.hf), `bandit` (zoo.tasks.bandit: one prompt, rows that seed the bandit rewards' noise),
`image_shapes` (zoo.tasks.images: a picture drawn with PIL per row, under the row's `images` key).
The question/answer kinds share the keys size, seed, eval_size, eval_seed, fewshot (a count, a
list of {question, answer}, or 0), system, instruction (appended to each question; default asks
for the final answer in \\boxed{}) and fewshot_answer (template of a worked answer turn).
Splits never share a question (zoo.tasks.base explains the order they are drawn in).
Default reasoning_gym configs are far too hard for a 135M model: `EASY_ARITHMETIC` is the measured
easy basic_arithmetic config (2 terms, 1 digit, + and -; 2-shot base accuracy ~0.59).
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from zoo.tasks import bandit, hf, images, reasoning_gym
from zoo.tasks.base import Loader, Task, TaskError, derive_seed, question_key
from zoo.tasks.fewshot import DEFAULT_FEWSHOT_ANSWER, DEFAULT_INSTRUCTION, build_prompt
from zoo.tasks.reasoning_gym import EASY_ARITHMETIC, EASY_ARITHMETIC_TASK
from zoo.tasks.stream import PromptStream

LOADERS: dict[str, Loader] = {
    "reasoning_gym": reasoning_gym.load,
    "hf": hf.load,
    "jsonl": hf.load,
    "bandit": bandit.load,
    "image_shapes": images.load,
}

__all__ = [
    "DEFAULT_FEWSHOT_ANSWER",
    "DEFAULT_INSTRUCTION",
    "EASY_ARITHMETIC",
    "EASY_ARITHMETIC_TASK",
    "LOADERS",
    "PromptStream",
    "Task",
    "TaskError",
    "build_prompt",
    "derive_seed",
    "known_tasks",
    "load_task",
    "question_key",
]


def known_tasks() -> list[str]:
    """Names accepted as a task spec's `name`."""
    return sorted(LOADERS)


def load_task(spec: Mapping[str, Any] | str) -> Task:
    """Load a task from its spec (a mapping from YAML; a bare string is taken as `{name: <it>}`).

    Returns a `Task` with `train`, `eval`, `fewshot` rows and the resolved `spec`.
    Raises TaskError for an unknown task name (listing the known ones), an unknown key, a bad value,
    an unknown reasoning_gym dataset (listing close matches), a missing column (listing those
    present), or data that cannot be loaded. Deterministic for a given spec.
    """
    if isinstance(spec, str):
        spec = {"name": spec}
    if not isinstance(spec, Mapping):
        raise TaskError(f"a task spec must be a mapping with 'name', got {spec!r}")
    name = spec.get("name")
    if name not in LOADERS:
        close = difflib.get_close_matches(str(name), list(LOADERS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TaskError(f"unknown task {name!r}{hint}; known tasks: {', '.join(known_tasks())}")
    return LOADERS[name]({k: v for k, v in spec.items() if k != "env"})  # `env`: the rollout's (zoo.envs)
