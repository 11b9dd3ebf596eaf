"""The multi-turn rollout: generate an assistant turn, let the environment answer, append its message,
continue until the environment says done, `max_turns` or the token budget (`task.env`, zoo.envs.base).

Each trajectory's tokens after the prompt are, turn by turn, the sampled ids (trained: loss mask 1,
with their `logp_rollout`) and the ids the template and the environment add (`zoo.envs.tokens`: the
`<|im_end|>` after a stop tag, role headers, tool messages; loss mask 0, attended to). The result is
one `Batch` whose completion is the whole conversation after the prompt: `lengths` [N] is its
attention extent, `loss_mask` [N, T] the policy's tokens and `policy_tokens` [N] their count. The G trajectories of a prompt are one group.
`texts` are the final assistant turns; each row gains `transcript` (every message; the trajectory's
own turns from index `transcript_start`) and `env_info` (the env's counters summed) for rewards that
read them.

Flags [N] in `Batch.extras` (float): env_turns, env_tool_calls, env_tool_errors, env_timeouts,
env_failed (the env raised or timed out: the row is unscored, never scored 0; a result outside the
contract, zoo.envs.contract, fails the run),
env_max_turns (stopped at max_turns; not truncation) and env_tokens (tokens with loss mask 0).
`truncated` [N]: a turn reached `budget.max_new_tokens` without EOS or stop tag, or the trajectory
reached `max_total_tokens`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import torch

from zoo.core.batch import Batch
from zoo.core.generator_types import SamplingParams
from zoo.envs.base import Env, EnvSpec
from zoo.envs.contract import EnvContractError, check_reset, check_step, check_stop
from zoo.envs.tokens import appended_ids, prompt_ids
from zoo.tasks.base import derive_seed

log = logging.getLogger(__name__)

FLAGS = ("env_turns", "env_tool_calls", "env_tool_errors", "env_timeouts", "env_failed", "env_max_turns", "env_tokens")


@dataclass
class _Trajectory:
    row: Mapping[str, Any]
    messages: list[dict]
    state: Any
    rendered: str
    prompt: list[int]
    ids: list[int] = field(default_factory=list)
    trained: list[bool] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    text: str = ""
    last: list[int] = field(default_factory=list)  # the last turn's sampled ids
    info: dict[str, float] = field(default_factory=dict)
    turns: int = 0
    timeouts: int = 0
    failed: bool = False
    truncated: bool = False
    max_turns: bool = False
    done: bool = False
    start: int = 0  # messages the trajectory started from (the rest are its turns)


@dataclass(frozen=True)
class _Failure:
    timeout: bool
    error: str


def rollout(
    generator: Any,
    tokenizer: Any,
    env: Env,
    spec: EnvSpec,
    rows: Sequence[Mapping[str, Any]],
    group_size: int,
    sampling: SamplingParams,
    seed: int,
) -> Batch:
    """G trajectories per row with `env` -> Batch (prompt-major, group id = index of the row).

    generator: a `zoo.core.kinds.Generator` (its `continue_` samples each turn; `sampling.max_new_tokens`
        is the budget of one turn, `sampling.micro_batch` the rows per call).
    seed: with the row's id and the trajectory's index, the seed of `env.reset` (`derive_seed`).
    Shapes: prompt_ids [N, P], completion_ids / loss_mask / logp_rollout [N, T], flags [N].
    Raises ValueError for a chat template that rewrites earlier turns; an environment's own errors
    fail only its trajectories (logged, flagged `env_failed`)."""
    name = str(spec.env.get("name"))
    stop = check_stop(env, name)
    errors: list[str] = []
    trajs = [
        _start(tokenizer, env, name, row, derive_seed(seed, f"env:{row.get('id', p)}:{g}"), errors)
        for p, row in enumerate(rows)
        for g in range(group_size)
    ]
    if trajs and len(errors) == len(trajs):  # not one conversation started: nothing to sample
        raise EnvContractError(f"env {name!r}: reset raised for every row of the step, e.g. {errors[0]}")
    for turn in range(spec.max_turns):
        active = [t for t in trajs if not t.done]
        if not active:
            break
        _sample_turn(generator, tokenizer, stop, spec, active, sampling)
        stepping = [t for t in active if not t.done]
        for t, res in zip(stepping, call_env(env, [(t.state, t.text) for t in stepping], spec.timeout_s, name)):
            _answer(tokenizer, spec, t, res, last_turn=turn + 1 >= spec.max_turns)
    return _batch(trajs, tokenizer, group_size)


def _start(tokenizer: Any, env: Env, name: str, row: Mapping[str, Any], seed: int, errors: list[str]) -> _Trajectory:
    try:
        res = env.reset(row, seed)
    except Exception as e:  # the trajectory fails; the others go on
        errors.append(f"{type(e).__name__}: {e}")
        log.warning("env %r reset raised %s: %s (the trajectory is failed)", name, type(e).__name__, e)
        messages, state = [dict(m) for m in row["prompt"]], None
        ids, text = prompt_ids(tokenizer, messages)
        return _Trajectory(row, messages, state, text, ids, failed=True, done=True, start=len(messages))
    messages, state = check_reset(res, name)
    ids, text = prompt_ids(tokenizer, messages)
    return _Trajectory(row, messages, state, text, ids, start=len(messages))


def _sample_turn(
    generator: Any,
    tokenizer: Any,
    stop: tuple[str, ...],
    spec: EnvSpec,
    active: list[_Trajectory],
    sampling: SamplingParams,
) -> None:
    """One assistant turn for every active trajectory (rows past their total budget are cut there)."""
    budgets = [min(sampling.max_new_tokens, spec.max_total_tokens - len(t.ids)) for t in active]
    sp = replace(sampling, max_new_tokens=max(budgets))
    mb = sampling.micro_batch or len(active)
    for s0 in range(0, len(active), mb):
        chunk = active[s0 : s0 + mb]
        c = generator.continue_([t.prompt + t.ids for t in chunk], sp, list(stop))
        for j, t in enumerate(chunk):
            n, budget = int(c.lengths[j]), budgets[s0 + j]
            ids, lp = c.ids[j, :n].tolist(), c.logp_rollout[j, :n].float().tolist()
            cut = n > budget
            if cut:
                ids, lp = ids[:budget], lp[:budget]
            t.text = tokenizer.decode(ids, skip_special_tokens=True) if cut else c.texts[j]
            t.ids += ids
            t.trained += [True] * len(ids)
            t.logp += lp
            t.last = ids
            t.turns += 1
            t.messages.append({"role": "assistant", "content": t.text})
            if cut or bool(c.truncated[j]):
                t.truncated = t.done = True


def _answer(tokenizer: Any, spec: EnvSpec, t: _Trajectory, res: Any, last_turn: bool) -> None:
    """Apply the environment's answer to one trajectory: counters, done, the appended tokens."""
    if isinstance(res, _Failure):
        log.warning("env step %s (the trajectory is failed)", res.error)
        t.failed, t.done = True, True
        t.timeouts += int(res.timeout)
        return
    new, done, info = res
    for k, v in info.items():
        t.info[k] = t.info.get(k, 0.0) + v
    if done or not new:
        t.done = True
        return
    if last_turn:
        t.max_turns = t.done = True
        return
    messages = t.messages + new
    ids, full = appended_ids(tokenizer, t.rendered, t.text, t.last, messages, [m["content"] for m in new])
    if len(t.ids) + len(ids) + 1 > spec.max_total_tokens:  # no room for one more sampled token
        t.truncated = t.done = True
        return
    t.messages, t.rendered = messages, full
    t.ids += ids
    t.trained += [False] * len(ids)
    t.logp += [0.0] * len(ids)


def call_env(env: Env, pairs: list[tuple[Any, str]], timeout_s: float, name: str = "env") -> list[Any]:
    """env.step (or env.step_batch once) for each (state, assistant text) -> per pair (messages, done,
    info) checked by zoo.envs.contract, or a failure (raised or timed out). Every call has `timeout_s`
    seconds from its own start (up to CALLS_AT_ONCE calls run at once); a call that times out keeps
    running in a daemon thread, which never holds up the process's exit; its answer is ignored.
    Raises EnvContractError for a result outside the contract."""
    if not pairs:
        return []
    batch = getattr(env, "step_batch", None)
    if batch is not None:
        res = _run_calls([(batch, ([s for s, _ in pairs], [x for _, x in pairs]))], timeout_s)[0]
        if isinstance(res, _Failure):
            return [res] * len(pairs)
        if not isinstance(res, (list, tuple)) or len(res) != len(pairs):
            raise EnvContractError(
                f"env {name!r}: step_batch returned {type(res).__name__} of length {len(res) if hasattr(res, '__len__') else '-'} "
                f"for {len(pairs)} rows; expected a list of (messages, done, info), one per row"
            )
        return [check_step(r, name, "step_batch") for r in res]
    out = []
    for s0 in range(0, len(pairs), CALLS_AT_ONCE):
        calls = [(env.step, p) for p in pairs[s0 : s0 + CALLS_AT_ONCE]]
        out += [r if isinstance(r, _Failure) else check_step(r, name) for r in _run_calls(calls, timeout_s)]
    return out


#: env calls that run at once (one daemon thread each)
CALLS_AT_ONCE = 64


def _run_calls(calls: list[tuple[Any, tuple]], timeout_s: float) -> list[Any]:
    """Each fn(*args) in its own daemon thread, all started now, each given `timeout_s` seconds ->
    its result or a _Failure (raised, or took longer)."""
    boxes: list[dict[str, Any]] = [{} for _ in calls]

    def target(box: dict[str, Any], fn: Any, args: tuple) -> None:
        try:
            box["res"] = fn(*args)
        except Exception as e:  # noqa: BLE001 - the env's own error fails its trajectory
            box["err"] = e

    threads = [threading.Thread(target=target, args=(b, fn, a), daemon=True) for b, (fn, a) in zip(boxes, calls)]
    deadline = time.monotonic() + timeout_s
    for th in threads:
        th.start()
    out: list[Any] = []
    for th, box in zip(threads, boxes):
        th.join(max(0.0, deadline - time.monotonic()))
        if th.is_alive():
            out.append(_Failure(True, f"took longer than timeout_s={timeout_s:g} s"))
        elif "err" in box:
            e = box["err"]
            out.append(_Failure(False, f"raised {type(e).__name__}: {e}"))
        else:
            out.append(box["res"])
    return out


def _batch(trajs: list[_Trajectory], tokenizer: Any, group_size: int) -> Batch:
    pad = int(tokenizer.pad_token_id)
    N = len(trajs)
    P = max(len(t.prompt) for t in trajs)
    T = max(1, max(len(t.ids) for t in trajs))
    prompt = torch.full((N, P), pad, dtype=torch.long)
    pmask = torch.zeros(N, P, dtype=torch.bool)
    comp = torch.full((N, T), pad, dtype=torch.long)
    loss = torch.zeros(N, T, dtype=torch.bool)
    logp = torch.zeros(N, T, dtype=torch.float32)
    for i, t in enumerate(trajs):
        prompt[i, P - len(t.prompt) :] = torch.tensor(t.prompt)
        pmask[i, P - len(t.prompt) :] = True
        if t.ids:
            comp[i, : len(t.ids)] = torch.tensor(t.ids)
            loss[i, : len(t.ids)] = torch.tensor(t.trained)
            logp[i, : len(t.ids)] = torch.tensor(t.logp)
    flags = {
        "env_turns": [t.turns for t in trajs],
        "env_tool_calls": [t.info.get("tool_calls", 0.0) for t in trajs],
        "env_tool_errors": [t.info.get("tool_errors", 0.0) for t in trajs],
        "env_timeouts": [t.timeouts for t in trajs],
        "env_failed": [t.failed for t in trajs],
        "env_max_turns": [t.max_turns for t in trajs],
        "env_tokens": [len(t.ids) - sum(t.trained) for t in trajs],
    }
    rows = [
        {
            **t.row,
            "transcript": t.messages,
            "transcript_start": t.start,
            "env_info": dict(t.info),
            "env_failed": t.failed,
        }
        for t in trajs
    ]
    return Batch(
        prompt_ids=prompt,
        prompt_mask=pmask,
        completion_ids=comp,
        loss_mask=loss,
        group_ids=torch.arange(N) // group_size,
        truncated=torch.tensor([t.truncated for t in trajs]),
        lengths=torch.tensor([len(t.ids) for t in trajs], dtype=torch.long),
        texts=[t.text for t in trajs],
        rows=rows,
        logp_rollout=logp,
        extras={k: torch.tensor(v, dtype=torch.float32) for k, v in flags.items()},
        policy_tokens=loss.sum(1),
    )
