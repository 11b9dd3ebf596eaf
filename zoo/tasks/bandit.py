"""A bandit task: every prompt is the same; the rows differ only by the seed of their rewards' noise.

    {name: bandit, prompt: "Pick an arm.", size: 4096, seed: 0, eval_size: 0}

Row i: {"prompt": [{"role": "user", "content": prompt}], "question": "pull <i>", "answer": "",
"source": "bandit", "id": "bandit-<i>", "noise_seed": derive_seed(seed, "bandit:<i>")}. The bandit
rewards (`zoo.rewards.bandit`) draw completion j of row i's group from `noise_seed` and j alone, so
two arms of a study see the same noise at each (run seed, step, completion): the run seed orders the
rows (`PromptStream`), the row fixes the noise. Keep `size` >= steps x prompts_per_step so that no
row (and no noise) is drawn twice in a run. Used by experiments/mo_grpo_bandit.yaml (MO-GRPO
arXiv:2509.22047 §5.1).
"""

from __future__ import annotations

from typing import Any, Mapping

from zoo.tasks.base import Task, TaskError, check_int, check_keys, derive_seed

DEFAULTS: dict[str, Any] = {"name": "bandit", "prompt": "Pick an arm.", "size": 4096, "seed": 0, "eval_size": 0}


def _row(prompt: str, seed: int, i: int) -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": prompt}],
        "question": f"pull {i}",
        "answer": "",
        "source": "bandit",
        "id": f"bandit-{i}",
        "noise_seed": derive_seed(seed, f"bandit:{i}"),
    }


def load(spec: Mapping[str, Any]) -> Task:
    """Load the bandit task (see the module docstring): `size` training rows and `eval_size` eval rows
    (rows size .. size + eval_size - 1, so no eval row shares a training row's noise).
    Raises TaskError for an unknown key, a size < 1, an eval_size or seed < 0, or an empty prompt."""
    check_keys(spec, DEFAULTS, "bandit task")
    s = {**DEFAULTS, **spec}
    check_int(s, "size", minimum=1)
    check_int(s, "eval_size", minimum=0)
    check_int(s, "seed", minimum=0)
    if not isinstance(s["prompt"], str) or not s["prompt"].strip():
        raise TaskError(f"bandit task key 'prompt' must be a non-empty string, got {s['prompt']!r}")
    train = [_row(s["prompt"], s["seed"], i) for i in range(s["size"])]
    ev = [_row(s["prompt"], s["seed"], s["size"] + i) for i in range(s["eval_size"])]
    return Task(name="bandit", train=train, eval=ev, spec=s)
