"""Held-out evaluation: greedy accuracy and avg@k (mean accuracy of k samples at a fixed temperature).

Accuracy counts a completion correct when its `correctness` score is exactly 1 (reasoning_gym gives
partial credit; environment.md). The training RNG is not disturbed: sampling runs under a forked RNG
seeded with the eval seed, so every evaluation of a run sees the same prompts and noise.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch

from zoo.rewards.compute import accuracy
from zoo.backends.generate.hf import generate_rollout


def evaluate(
    model: torch.nn.Module,
    tokenizer: Any,
    rows: Sequence[dict],
    correctness: Callable[[list[str], list[dict]], list[float | None]],
    *,
    max_new_tokens: int,
    samples: int,
    temperature: float,
    seed: int,
    micro_batch: int = 16,
    env: Any = None,
) -> dict[str, float]:
    """{"eval/greedy_acc", "eval/avg_at_k", "eval/k", "eval/n", "eval/unscored"} on `rows` (empty rows
    -> {}). Accuracy is `zoo.rewards.accuracy`: scores == 1.0 among the scored ones; a completion the
    reward could not score (None) is left out and counted in eval/unscored, as in training.
    env: a `zoo.envs.base.EnvSpec` (the run's `task.env`): every completion is a multi-turn rollout
    with the environment (the same rollout as training's, greedy for greedy_acc), scored on its final
    assistant turn; a failed trajectory is unscored; adds eval/tool_calls (greedy, per prompt)."""
    if not rows:
        return {}
    if env is not None:
        return _evaluate_env(model, tokenizer, rows, correctness, env, max_new_tokens=max_new_tokens, samples=samples,
                             temperature=temperature, seed=seed, micro_batch=micro_batch)
    prompts = [r["prompt"] for r in rows]
    devices = [model.device] if getattr(model, "device", None) is not None and model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        greedy = generate_rollout(model, tokenizer, prompts, group_size=1, max_new_tokens=max_new_tokens,
                                  do_sample=False, micro_batch=micro_batch)
        sampled = generate_rollout(model, tokenizer, prompts, group_size=samples, max_new_tokens=max_new_tokens,
                                   temperature=temperature, micro_batch=micro_batch)
    g = correctness(greedy.texts, copy.deepcopy(list(rows)))  # copies: a reward that edits its rows changes nothing
    rep = [r for r in rows for _ in range(samples)]
    s = correctness(sampled.texts, copy.deepcopy(rep))
    g_t, s_t = _scores(g), _scores(s)  # [n], [n * k]; NaN = could not be scored
    return {"eval/greedy_acc": accuracy(g_t), "eval/avg_at_k": accuracy(s_t), "eval/k": float(samples),
            "eval/n": float(len(rows)), "eval/unscored": float(torch.isnan(g_t).sum() + torch.isnan(s_t).sum())}


def _evaluate_env(model, tokenizer, rows, correctness, env, *, max_new_tokens: int, samples: int, temperature: float,
                  seed: int, micro_batch: int) -> dict[str, float]:
    from zoo.backends.generate.hf_generator import HFGenerator
    from zoo.backends.generate.types import SamplingParams
    from zoo.envs.rollout import rollout

    gen, built = HFGenerator(model, tokenizer), env.build()
    devices = [model.device] if getattr(model, "device", None) is not None and model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        greedy = rollout(gen, tokenizer, built, env, rows, 1, SamplingParams(
            max_new_tokens=max_new_tokens, do_sample=False, micro_batch=micro_batch), seed)
        sampled = rollout(gen, tokenizer, built, env, rows, samples, SamplingParams(
            max_new_tokens=max_new_tokens, temperature=temperature, micro_batch=micro_batch), seed)
    g_t, s_t = (_scores([None if failed else x for x, failed in zip(correctness(b.texts, copy.deepcopy(b.rows)),
                                                                   b.extras["env_failed"].tolist())])
                for b in (greedy, sampled))
    return {"eval/greedy_acc": accuracy(g_t), "eval/avg_at_k": accuracy(s_t), "eval/k": float(samples),
            "eval/n": float(len(rows)), "eval/unscored": float(torch.isnan(g_t).sum() + torch.isnan(s_t).sum()),
            "eval/tool_calls": float(greedy.extras["env_tool_calls"].mean())}


def _scores(xs: Sequence[float | None]) -> torch.Tensor:
    """[n] float32, None -> NaN (left out of the accuracy, as in training)."""
    return torch.tensor([float("nan") if x is None else float(x) for x in xs], dtype=torch.float32)
