"""One training step, top to bottom: the stages of DESIGN.md in order, one call each.

    batch = sample(st)           generate -> reward -> length -> objectives -> filter (zoo/step/sample.py)
    rollout_forwards             old / reference log-probs, critic values (only what the variant needs)
    kl_reward                    KL placement "reward": batch.kl_reward [N, T]
    advantage                    the estimator -> batch.advantages [N, T] (+ returns for a critic)
    normalize                    the normalizer, over the global batch under data parallelism
    diagnostics                  adv/corr/<objective>, length by correctness (zoo/step/diagnostics.py)
    update                       epochs x minibatches optimizer steps (clip rule, KL in the loss,
                                 entropy bonus, aggregation over the whole optimizer step), critic;
                                 then the generator's `sync(policy)` when an optimizer step was applied
    controllers                  stateful coefficients (adaptive KL beta) move for the next step

The trainer (`zoo.trainer`) sets up, loops, checkpoints and evaluates around `step`; a tool that
measures the step (`zoo bench`) passes `hooks` (zoo/step/hooks.py), which see each phase and forward.
"""
from __future__ import annotations

import time
from typing import Any

from zoo import dist, strategy
from zoo.provenance import peak_memory_mb
from zoo.rewards.compute import accuracy_index
from zoo.step.advantages import advantage, empty_rows, kl_reward, normalize, normalize_global
from zoo.step.diagnostics import step_diagnostics
from zoo.step.forwards import rollout_forwards
from zoo.step.hooks import NO_HOOKS, Hooks
from zoo.step.sample import sample
from zoo.step.types import RunState
from zoo.step.update import update


def step(st: RunState, hooks: Hooks = NO_HOOKS) -> dict[str, Any]:
    """One rollout step of the run `st` (advances st.step). Returns its metrics (means over ranks),
    with the first round's sample completions under "_samples". `hooks` observe the phases and
    forwards (zoo/step/hooks.py; default: none)."""
    t0 = time.perf_counter()
    coefs = coefficients(st)  # what the controllers set for this step: {term: {hyperparameter: value}}
    beta = coefs.get("kl", {}).get("beta", st.slots.kl.beta)
    strategy.gather_weights(st.models.parallel)  # fsdp: whole weights while ranks run different numbers of forwards
    batch, m = sample(st, hooks)                                            # generate .. filter
    if batch.size == 0:
        m["train/skipped"] = 1.0  # the guards (trainer.train) log the step without an update
    t1 = time.perf_counter()
    if batch.size:
        with hooks.phase("forward"):
            batch = rollout_forwards(batch, st.models, st.slots, st.settings, hooks)   # forwards
    strategy.release_weights(st.models.parallel)
    t2 = time.perf_counter()
    if batch.size:
        with hooks.phase("advantage") as ph:
            ph.batch = batch
            batch, km = kl_reward(batch, st.slots, beta)                    # kl_reward
            batch = advantage(batch, st.slots)                              # advantage
            batch, am = normalize(batch, st.slots)                          # normalize
        m.update({**km, **am})
    elif dist.is_distributed():
        normalize_global(st.slots.normalizer, *empty_rows(st.device))  # join the other ranks' gather
    names, weights = m.pop("_objectives", (list(st.reward_names), [w for _, w in st.rewards]))
    m.update(step_diagnostics(batch, names, weights, len(st.reward_names),                 # diagnostics
                              accuracy_index([c for c, _ in st.rewards])))
    t3 = time.perf_counter()
    warmup = st.step < st.variant.critic_warmup  # value pretraining: the critic alone trains (policy frozen)
    with hooks.phase("train"):
        m.update(update(batch, st.models, st.slots, st.settings, st.optimizer, st.scheduler, coefs,    # update
                        critic_optimizer=st.critic_optimizer, hooks=hooks, train_policy=not warmup))
    if st.variant.critic_warmup:
        m["critic/warmup"] = float(warmup)  # 1 while only the critic trains
    if st.generator is not None and not warmup and m.get("optim/updates", 0) > 0:  # the policy changed: sync
        ts = time.perf_counter()
        st.generator.sync(st.models.policy)
        m["time/sync"] = time.perf_counter() - ts  # part of time/train
    if st.critic_scheduler is not None:
        for _ in range(st.settings.epochs * st.settings.minibatches):
            st.critic_scheduler.step()
    t4 = time.perf_counter()
    tokens = float(batch.loss_mask.sum()) if batch.size else 0.0
    for c in st.controllers:                                                # controllers
        c.update(m, tokens, float(batch.size))
    for term, params in coefficients(st).items():  # what the controllers set for the next step, e.g. entropy_bonus/coef
        m.update({f"{term}/{k}": v for k, v in params.items()})
    m["kl/beta"] = coefficients(st).get("kl", {}).get("beta", st.slots.kl.beta)  # for the next step
    m["optim/lr"] = float(st.scheduler.get_last_lr()[0])
    m.update({"time/forward": t2 - t1, "time/advantage": t3 - t2, "time/train": t4 - t3, "time/step": t4 - t0})
    _count(st, m, batch, t4 - t0)
    st.step += 1
    if st.cfg.ref_reset_every and st.reference is not None and st.step % st.cfg.ref_reset_every == 0:
        from zoo.models import reset_reference

        reset_reference(st.reference, st.models.policy)
        m["kl/ref_resets"] = float(st.reference.resets)
    samples = m.pop("_samples", [])
    out = dist.all_reduce_mean_dict({k: v for k, v in m.items() if isinstance(v, (int, float))})
    out["_samples"] = samples
    return out


def coefficients(st: RunState) -> dict[str, dict[str, float]]:
    """{term name: {hyperparameter: value}} that the run's controllers set now."""
    out: dict[str, dict[str, float]] = {}
    for c in st.controllers:
        for term, params in c.coefficients().items():
            out.setdefault(term, {}).update(params)
    return out


def _count(st: RunState, m: dict[str, Any], batch: Any, seconds: float) -> None:
    """Throughput, memory and the run's running totals into the step's metrics."""
    gen_tokens = float(batch.policy_tokens.sum()) if batch.size else 0.0  # sampled by the policy
    m["perf/tokens_per_s"] = gen_tokens / max(seconds, 1e-9)
    m["perf/peak_mem_mb"] = peak_memory_mb(st.device)
    st.totals["elapsed"] += seconds
    m["count/completions"] = st.totals["completions"]
    m["count/tokens"] = st.totals["tokens"]
    m["time/elapsed"] = st.totals["elapsed"]
