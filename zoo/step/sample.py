"""The step's first stages, in resampling rounds: generate -> reward -> length -> objectives ->
filter, until the step holds `budget.prompts_per_step` groups or the resample cap is reached
(DAPO Alg. 1's "refill the batch", arXiv:2503.14476).

Sampling filters drop whole groups before any further forward pass. Round 0 draws from the run's
prompt stream, later rounds from their own stream, so step k's first-round prompts are the same in
every arm of a study (paired comparison) whatever the filters dropped."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch

from zoo import dist
from zoo.batch import Batch, concat
from zoo.config.run import GENERATE_BATCH
from zoo.guards import RunFailed
from zoo.rewards.compute import accuracy_index, accuracy_metrics, compute_rewards
from zoo.backends.generate.hf_generator import HFGenerator
from zoo.backends.generate.types import SamplingParams
from zoo.envs.run import conversation, env_metrics, has_env, run_rollout, unscore_failed
from zoo.step.diagnostics import gold_metrics
from zoo.step.forwards import autocast
from zoo.step.hooks import NO_HOOKS, Hooks
from zoo.step.scoring import keep_rows, length_shaping, objective_scores, per_row_metrics
from zoo.step.types import RunState


def generate(st: RunState, rows: list[dict[str, Any]], group_offset: int) -> Batch:
    """G completions for each dataset row's prompt from the run's generator (`st.generator`, built from
    `sampling.backend`) -> Batch with logp_rollout (group ids start at `group_offset`)."""
    cfg, s, G = st.cfg, st.settings, st.variant.group_size
    gen = st.generator if st.generator is not None else HFGenerator(st.models.policy, st.models.tokenizer)
    sampling = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=cfg.sampling.top_p,
                              micro_batch=s.generate_batch or max(G, GENERATE_BATCH),  # sampling.batch_size
                              min_new_tokens=s.max_new_tokens if cfg.sampling.ignore_eos else 0)
    with autocast(s.autocast, st.device):
        try:
            if has_env(cfg):  # multi-turn: the task's environment answers each turn (zoo/envs/rollout.py)
                return run_rollout(st, gen, rows, group_offset, sampling)
            b = gen.generate([r["prompt"] for r in rows], G, sampling)
        except RuntimeError as e:  # torch.multinomial on NaN/inf probabilities: the weights diverged
            if "probability tensor contains" not in str(e):
                raise
            raise RunFailed(
                f"step {st.step + 1}: sampling failed because the policy's next-token probabilities are not "
                f"finite (NaN/inf logits), although its weights are: the previous updates diverged (optim.lr "
                f"{cfg.optim.lr:g} too high?); the last checkpoint is kept") from None
    # a fresh rollout is prompt-major: group id = index of the prompt in `rows`
    return replace(b, rows=[rows[i] for i in b.group_ids.tolist()], group_ids=b.group_ids + group_offset)


def sample(st: RunState, hooks: Hooks = NO_HOOKS) -> tuple[Batch, dict[str, Any]]:
    """Rounds of generate, reward, length, objectives, filter; returns the kept rows and metrics.

    Reward metrics describe every completion of round 0; `groups/kept_frac` says how many groups
    the filters kept over all rounds. A collective under data parallelism (ranks stop together).
    `hooks` sees each round's "generate" and "score" (reward .. filter) phases."""
    cfg, s = st.cfg, st.settings
    p_local = max(1, cfg.budget.prompts_per_step // dist.world_size())
    reward_fns, weights = [c for c, _ in st.rewards], [w for _, w in st.rewards]
    kept: list[Batch] = []
    n_kept = n_groups = 0
    first: dict[str, Any] = {}
    t_gen = t_score = 0.0
    local_done = [0.0, 0.0]  # completions, tokens generated on this rank
    rounds = 0
    for rnd in range(cfg.budget.max_resample_rounds + 1):
        # every rank takes the same rows from the stream (it stays in lockstep, so one saved position
        # serves all ranks) and keeps its own disjoint slice; the ranks decide together when to stop
        needs = [int(n) for n in dist.per_rank(p_local - n_kept)]
        if rnd > 0 and (not st.slots.filter or sum(needs) == 0):
            break
        rounds += 1
        start = sum(needs[: dist.rank()])
        source = st.stream if rnd == 0 else st.resample_stream
        rows = source.take(sum(needs))[start : start + needs[dist.rank()]]
        if not rows:
            continue
        t0 = time.perf_counter()
        with hooks.phase("generate") as ph:
            b = ph.batch = generate(st, rows, n_groups)                                       # generate
        t1 = time.perf_counter()
        with hooks.phase("score") as ph:
            objectives, n_failed = unscore_failed(b, *compute_rewards(reward_fns, b.texts, b.rows))  # reward
            b, obj, names, w, m = length_shaping(b, objectives, st.reward_names, weights, st.slots,
                                                 s.max_new_tokens, accuracy_index(reward_fns))  # length
            b, sm = objective_scores(b, obj, names, w, st.slots)                              # objectives
            per_row = per_row_metrics(objectives, st.reward_names, b.scores, accuracy_index(reward_fns))
            keep = keep_rows(per_row, b.group_ids, st.slots)                                  # filter
            ph.batch = b
        t_gen += t1 - t0
        t_score += time.perf_counter() - t1
        if rnd == 0:
            first = {**sm, **m, **accuracy_metrics(objectives, reward_fns), **_completion_metrics(b), **env_metrics(b),
                     **gold_metrics(st.gold, b.texts, b.rows)}
            first["_objectives"] = (list(names), list(w))  # the columns the diagnostics correlate (pipeline)
            first["reward/unscored_frac"] = max(n_failed, default=0) / max(b.size, 1)  # the worst reward's
            first["_samples"] = [
                {"prompt": r.get("question", ""), "completion": conversation(r, t),
                 **{n: float(objectives[i, k]) for k, n in enumerate(st.reward_names)}}
                for i, (t, r) in enumerate(zip(b.texts, b.rows))
            ]
        local_done[0] += b.size
        local_done[1] += float(b.policy_tokens.sum())
        n_groups += int(len(torch.unique(b.group_ids)))
        if bool(keep.any()):
            kb = b.select(keep)
            kept.append(kb)
            n_kept += int(len(torch.unique(kb.group_ids)))
    done = dist.all_reduce_sum(torch.tensor(local_done, dtype=torch.float64))
    st.totals["completions"] += float(done[0])
    st.totals["tokens"] += float(done[1])
    batch = concat(kept, int(st.models.tokenizer.pad_token_id)) if kept else b.select([])
    first.update({
        "groups/kept_frac": n_kept / max(n_groups, 1),
        "groups/dropped": float(n_groups - n_kept),
        "groups/rounds": float(rounds),
        "time/generate": t_gen,
        "time/score": t_score,
    })
    return batch, first


def _completion_metrics(b: Batch) -> dict[str, float]:
    return {"completion/len_mean": float(b.policy_tokens.float().mean()), "completion/len_max": float(b.policy_tokens.max()),
            "completion/truncated_frac": float(b.truncated.float().mean())}
