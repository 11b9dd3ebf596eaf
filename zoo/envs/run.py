"""The env rollout inside a training step: what zoo/step/sample.py calls when the run's task has an
`env` (zoo.envs.rollout does the work), the step's env metrics, and unscoring failed trajectories."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from zoo.core.batch import Batch
from zoo.core.generator_types import SamplingParams
from zoo.envs.base import env_spec
from zoo.envs.rollout import rollout
from zoo.tasks.base import derive_seed


def has_env(cfg: Any) -> bool:
    """Whether the run config's task names an environment (`task.env`)."""
    return isinstance(cfg.task, dict) and cfg.task.get("env") is not None


def run_rollout(
    st: Any, generator: Any, rows: list[dict[str, Any]], group_offset: int, sampling: SamplingParams
) -> Batch:
    """The step's rollout with the task's environment: G trajectories per row (group ids start at
    `group_offset`), on the policy's device (the caller holds the step's autocast). `st` is a
    zoo.step.types.RunState."""
    spec = env_spec(st.cfg.task)
    b = rollout(
        generator,
        st.models.tokenizer,
        spec.build(),
        spec,
        rows,
        st.variant.group_size,
        sampling,
        derive_seed(st.cfg.seed, f"env-step:{st.step}:{group_offset}"),
    )
    return replace(b, group_ids=b.group_ids + group_offset).to(st.device)


def conversation(row: dict[str, Any], text: str) -> str:
    """What a sample table shows as the completion: `text` (the final turn), or with an env the whole
    conversation after the prompt, one `role: content` line per message."""
    turns = row.get("transcript")
    if not turns:
        return text
    return "\n".join(f"{m['role']}: {m['content']}" for m in turns[row.get("transcript_start", 0) :])


def env_metrics(b: Batch) -> dict[str, float]:
    """Per-trajectory means of the env flags ({} without an env): env/turns, env/tool_calls,
    env/tool_errors, env/timeouts, env/failed_frac, env/max_turns_frac, env/token_frac (the
    tokens after the prompt that the environment and template added, over all of them) and, once the
    batch is scored, env/reward_calls_{0,1,2plus}: the mean raw value of the run's first reward
    (objectives[:, 0], usually correctness) over the trajectories with that many tool calls (absent
    when there are none)."""
    x = b.extras
    if "env_turns" not in x or b.size == 0:
        return {}
    out = {f"env/{k}": float(x[f"env_{k}"].float().mean()) for k in ("turns", "tool_calls", "tool_errors", "timeouts")}
    out["env/failed_frac"] = float(x["env_failed"].float().mean())
    out["env/max_turns_frac"] = float(x["env_max_turns"].float().mean())
    out["env/token_frac"] = float(x["env_tokens"].sum()) / max(float(b.lengths.sum()), 1.0)
    if b.objectives is not None and b.objectives.shape[1]:  # the first reward by number of tool calls
        first = b.objectives[:, 0]
        calls = x["env_tool_calls"].to(first.device).clamp(max=2)
        for k, name in ((0, "0"), (1, "1"), (2, "2plus")):
            r = first[(calls == k) & ~torch.isnan(first)]
            if r.numel():
                out[f"env/reward_calls_{name}"] = float(r.float().mean())
    return out


def unscore_failed(b: Batch, objectives: torch.Tensor, n_failed: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Objectives [N, K] with the rows of failed trajectories (`env_failed`) set to NaN (unscored,
    counted in n_failed [K] like a reward that could not score them); unchanged without an env."""
    failed = b.extras.get("env_failed")
    if failed is None or not bool(failed.any()):
        return objectives, n_failed
    out = objectives.clone()
    out[failed.bool().to(out.device)] = math.nan
    return out, [int(torch.isnan(out[:, k]).sum()) for k in range(out.shape[1])]
