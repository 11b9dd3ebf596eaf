"""Held-out evaluation: greedy accuracy and avg@k (mean accuracy of k samples at a fixed temperature).

Completions come from a generator (`eval.backend`, by default the run's `sampling.backend`, a
wrapper such as `noisy` through what it wraps), so every backend is evaluated with itself; with
`task.env` each completion is the same multi-turn rollout as training's, through that generator.
Accuracy counts a completion correct when its `correctness` score is exactly 1 (reasoning_gym gives
partial credit; environment.md). The training RNG is not disturbed: sampling runs under a forked RNG
seeded with the eval seed, so every evaluation of a run sees the same prompts and noise.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch

from zoo.backends.generate.backend import generate_rows
from zoo.core.generator_types import SamplingParams
from zoo.rewards.compute import accuracy
from zoo.run.eval_record import per_prompt as prompt_scores


def evaluate(
    generator: Any,
    tokenizer: Any,
    rows: Sequence[dict],
    correctness: Callable[[list[str], list[dict]], list[float | None]],
    *,
    max_new_tokens: int,
    samples: int,
    temperature: float,
    seed: int,
    batch_size: int = 16,
    device: torch.device | None = None,
    env: Any = None,
    per_prompt: dict[str, float | None] | None = None,
) -> dict[str, float]:
    """{"eval/greedy_acc", "eval/avg_at_k", "eval/k", "eval/n", "eval/unscored"} on `rows` (empty rows
    -> {}). Accuracy is `zoo.rewards.accuracy`: scores == 1.0 among the scored ones; a completion the
    reward could not score (None) is left out and counted in eval/unscored, as in training.

    generator: a `zoo.core.kinds.Generator` (the run's `eval.backend`, by default its `sampling.backend`:
    `zoo.backends.generate.backend.eval_generator`); greedy is `do_sample=False`, avg@k samples at
    `temperature` with top-p 1 and no top-k. samples: k for avg@k; 0 samples nothing and leaves
    eval/avg_at_k out (greedy accuracy only, half the cost). tokenizer: the policy's (the env rollout's templates).
    batch_size: rows per underlying generate call. device: whose RNG is forked besides the CPU's (a
    CUDA device; None: the CPU's alone).
    env: a `zoo.envs.base.EnvSpec` (the run's `task.env`): every completion is a multi-turn rollout
    with the environment (the same rollout as training's, greedy for greedy_acc), scored on its final
    assistant turn; a failed trajectory is unscored; adds eval/tool_calls (greedy, per prompt).
    per_prompt: a dict to fill with {prompt id: greedy score} (zoo.run.eval_record.per_prompt; None where
    the reward could not score), for the report's after - before pairing over prompts."""
    if not rows:
        return {}
    devices = [device] if device is not None and torch.device(device).type == "cuda" else []
    greedy_params = SamplingParams(max_new_tokens=max_new_tokens, do_sample=False, micro_batch=batch_size)
    sampled_params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, micro_batch=batch_size)
    if env is not None:
        return _evaluate_env(
            generator,
            tokenizer,
            rows,
            correctness,
            env,
            greedy_params,
            sampled_params,
            samples=samples,
            seed=seed,
            devices=devices,
            per_prompt=per_prompt,
        )
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        greedy = generate_rows(generator, rows, 1, greedy_params)  # with the rows' images, if any
        sampled = generate_rows(generator, rows, samples, sampled_params) if samples else None
    g = correctness(greedy.texts, copy.deepcopy(list(rows)))  # copies: a reward that edits its rows changes nothing
    rep = [r for r in rows for _ in range(samples)]
    s = correctness(sampled.texts, copy.deepcopy(rep)) if sampled is not None else []
    g_t, s_t = _scores(g), _scores(s)  # [n], [n * k]; NaN = could not be scored
    if per_prompt is not None:
        per_prompt.update(prompt_scores(rows, g))
    return _metrics(g_t, s_t, samples, len(rows))


def _evaluate_env(
    generator,
    tokenizer,
    rows,
    correctness,
    env,
    greedy_params: SamplingParams,
    sampled_params: SamplingParams,
    *,
    samples: int,
    seed: int,
    devices: list,
    per_prompt: dict[str, float | None] | None = None,
) -> dict[str, float]:
    from zoo.envs.rollout import rollout

    built = env.build()
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        greedy = rollout(generator, tokenizer, built, env, rows, 1, greedy_params, seed)
        sampled = rollout(generator, tokenizer, built, env, rows, samples, sampled_params, seed) if samples else None
    g_t, s_t = (
        _scores(
            [
                None if failed else x
                for x, failed in zip(correctness(b.texts, copy.deepcopy(b.rows)), b.extras["env_failed"].tolist())
            ]
            if b is not None
            else []
        )
        for b in (greedy, sampled)
    )
    if per_prompt is not None:
        per_prompt.update(prompt_scores(rows, [None if x != x else float(x) for x in g_t.tolist()]))  # G = 1: row order
    return {**_metrics(g_t, s_t, samples, len(rows)), "eval/tool_calls": float(greedy.extras["env_tool_calls"].mean())}


def _metrics(g_t: torch.Tensor, s_t: torch.Tensor, samples: int, n: int) -> dict[str, float]:
    """The eval metrics of greedy scores g_t [n] and sampled scores s_t [n * k]; no eval/avg_at_k when
    k = 0 (no sampled completions)."""
    out = {
        "eval/greedy_acc": accuracy(g_t),
        "eval/k": float(samples),
        "eval/n": float(n),
        "eval/unscored": float(torch.isnan(g_t).sum() + torch.isnan(s_t).sum()),
    }
    if samples:
        out["eval/avg_at_k"] = accuracy(s_t)
    return out


def _scores(xs: Sequence[float | None]) -> torch.Tensor:
    """[n] float32, None -> NaN (left out of the accuracy, as in training)."""
    return torch.tensor([float("nan") if x is None else float(x) for x in xs], dtype=torch.float32)
