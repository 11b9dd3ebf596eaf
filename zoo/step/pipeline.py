"""One training step, top to bottom: the stages of docs/concepts/engine.md's opening table in order, one call each.

    per resampling round (zoo/step/sample.py `Rounds`: round 0, then refills while filters drop groups)
      generate                   the run's generator -> Batch with logp_rollout
      reward                     the run's rewards -> objectives [N, K]
      length                     length shaping: extra objective columns and/or loss-mask rows
      objectives                 objective normalizer + weights -> scores [N]
      (stages after reward)      plugin stages (zoo/core/stages.py) write Batch.extras, here and below
      filter                     sampling filters keep whole groups
    rollout_forwards             old / reference log-probs, critic values (only what some component reads)
                                 (+ OTB's energy extras["otb_energy"], from the old forward)
    (teacher)                    a distill: variant's teacher log-probs of the sampled tokens (zoo/step/distill.py)
    (stages after forwards)
    kl_reward                    KL placement "reward": batch.kl_reward [N, T]
    advantage                    the estimator -> batch.advantages [N, T] (+ returns for a critic)
    normalize                    the normalizer, over the global batch under data parallelism
    (distill)                    + the teacher's per-token signal, after the normalizer
    (stages after advantage)
    diagnostics                  adv/corr/<objective>, length by correctness (zoo/step/diagnostics.py)
    update                       epochs x minibatches optimizer steps (clip rule, KL in the loss,
                                 entropy bonus, aggregation over the whole optimizer step), critic;
                                 then the generator's `sync(policy)` when an optimizer step was applied
    controllers                  stateful coefficients (adaptive KL beta) move for the next step
    reference reset              every `ref_reset_every` steps the reference becomes the policy

Coefficients that a controller may move come from one lookup, `coefficients(st)` ({target:
{hyperparameter: value}}); a stage or term finds its own by its name (`zoo.step.types.params`).
The trainer (`zoo.run.trainer`) sets up, loops, checkpoints and evaluates around `step`; a tool that
measures the step (`zoo bench`) passes `hooks` (zoo/step/hooks.py), which see each phase and forward.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from zoo.backends.train import strategy
from zoo.backends.train.memory import peak_memory_mb
from zoo.core import dist
from zoo.core.batch import Batch
from zoo.core.stages import run as run_stages
from zoo.envs.run import unscore_failed
from zoo.models.reference import reset_reference
from zoo.rewards.compute import accuracy_index, compute_rewards
from zoo.step.advantages import advantage, empty_rows, kl_reward, normalize, normalize_global
from zoo.step.diagnostics import step_diagnostics
from zoo.step.distill import distill, distill_empty, score_teacher
from zoo.step.distill_vocab import FIELD as VOCAB_FIELD
from zoo.step.forwards import first_order, reuses_old, rollout_forwards
from zoo.step.greedy import reads_greedy, with_greedy_score
from zoo.step.hooks import NO_HOOKS, Hooks
from zoo.step.pacing import staleness_metrics
from zoo.step.producer import assemble, published
from zoo.step.sample import Rounds, generate
from zoo.step.scoring import keep_rows, length_shaping, objective_scores, per_row_metrics
from zoo.step.types import RunState
from zoo.step.update import update


@dataclass
class StepResult:
    """One step's outcome. batch: the rows the update trained on (after the filters; with
    advantages [N, T]; empty when every group was dropped); metrics: the step's metrics, means over
    ranks; samples: round 0's completions with their reward columns (this rank's), for the samples log."""

    batch: Batch
    metrics: dict[str, float]
    samples: list[dict[str, Any]] = field(default_factory=list)


def step(st: RunState, hooks: Hooks = NO_HOOKS) -> StepResult:
    """One rollout step of the run `st` (advances st.step). `hooks` observe the phases and forwards
    (zoo/step/hooks.py; default: none): "generate" and "score" (reward .. filter) per round, then
    "forward", "advantage", "train". A collective under data parallelism."""
    t0 = time.perf_counter()
    coefs = coefficients(st)  # {target: {hyperparameter: value}} for this step
    acc = accuracy_index([c for c, _ in st.rewards])
    strategy.gather_weights(st.models.parallel)  # fsdp: whole weights while ranks run different numbers of forwards
    if st.rollouts is None:
        rounds = _sample(st, hooks, acc)  # generate -> reward -> length -> objectives -> filter, per round
        batch, m = rounds.finish()
    else:  # async: the step's groups from the rollout workers (zoo/step/producer.py), then reward .. filter
        rounds, am = _sample_async(st, hooks, acc)
        batch, m = rounds.finish()
        m.update(am)
    if batch.size == 0:
        m["train/skipped"] = 1.0  # the guards (trainer.train) log the step without an update
    t1 = time.perf_counter()
    batch, order = _forwards(st, batch, hooks)  # old / reference log-probs, values, the teacher's
    strategy.release_weights(st.models.parallel)
    t2 = time.perf_counter()
    batch, am = _advantages(st, batch, coefs, hooks)  # kl_reward -> advantage -> normalize (-> distill)
    m.update(am)
    m.update(step_diagnostics(batch, *rounds.objective_columns, len(st.reward_names), acc))  # diagnostics
    t3 = time.perf_counter()
    m.update(_train(st, batch, coefs, order, hooks))  # update, then the generator's sync
    if st.rollouts is not None:  # the new weights, version step + 1, for the workers' next groups
        st.rollouts.publish(published(st.models.policy, st.step + 1))
    t4 = time.perf_counter()
    _controllers(st, m, batch)  # controllers, and the coefficients the next step uses
    m.update({"time/forward": t2 - t1, "time/advantage": t3 - t2, "time/train": t4 - t3, "time/step": t4 - t0})
    _count(st, m, batch, t4 - t0)
    st.step += 1
    _reference_reset(st, m)
    out = dist.all_reduce_mean_dict({k: v for k, v in m.items() if isinstance(v, (int, float))})
    return StepResult(batch=batch, metrics=out, samples=rounds.samples)


def _sample(st: RunState, hooks: Hooks, acc: int | None) -> Rounds:
    """The resampling rounds (zoo/step/sample.py `Rounds`): each generates, scores and filters; the
    kept groups and round 0's record are in the returned `Rounds` (its `finish()` gives the batch)."""
    rounds = Rounds(st)
    for rows in rounds:  # resampling rounds
        with rounds.timed("generate"), hooks.phase("generate") as ph:
            b = ph.batch = generate(st, rows, rounds.n_groups)  # generate
        with rounds.timed("score"), hooks.phase("score") as ph:
            b, keep, scored = _score(st, b, rows, rounds.n_groups, acc)
            ph.batch = b
        if rounds.first:
            rounds.record_first(b, *scored)
        rounds.add(b, keep)
    return rounds


def _sample_async(st: RunState, hooks: Hooks, acc: int | None) -> tuple[Rounds, dict[str, float]]:
    """Asynchronous training's sampling (docs/guides/async.md): the step's B groups from the rollout
    workers (`st.rollouts`, a zoo.step.producer.Producer) in group order, then reward .. filter as one
    round. Returns (the round, the async/* metrics and the queue waits)."""
    rounds = Rounds(st)
    rounds.index, rounds.rounds = 0, 1  # one round: the async step has no refill rounds (zoo.checks.async_run)
    with rounds.timed("generate"), hooks.phase("generate") as ph:
        groups, waited = st.rollouts.take(st.step)  # waits for the workers: time/wait_workers
        b = ph.batch = assemble(groups, int(st.models.tokenizer.pad_token_id))
    rows = [f.slot.row for f in groups]
    with rounds.timed("score"), hooks.phase("score") as ph:
        b, keep, scored = _score(st, b, rows, 0, acc)
        ph.batch = b
    rounds.record_first(b, *scored)
    for sample, v in zip(rounds.samples, b.extras["policy_version"].tolist()):
        sample["policy_version"] = int(v)  # the samples log: which version sampled each completion
    rounds.add(b, keep)
    m = staleness_metrics(groups, st.step, st.rollouts.pacer.max_staleness)
    m.update({"time/wait_workers": waited, "time/wait_trainer": st.rollouts.idle_seconds()})
    m["async/generate_s"] = sum(f.seconds for f in groups)  # the workers' seconds for this step's groups
    m.update(st.rollouts.pop_metrics())
    return rounds, m


def _score(
    st: RunState, b: Batch, rows: list[dict[str, Any]], n_groups: int, acc: int | None
) -> tuple[Batch, Tensor, tuple[Tensor, list[int], dict[str, float], tuple[list[str], list[float]]]]:
    """reward -> length -> objectives (-> the greedy baseline) -> plugin stages -> filter, on one
    round's batch of N rows. Returns (scored batch, keep [N] bool: the filters' kept rows, what
    `Rounds.record_first` takes after the batch: objectives [N, K], failed rows, the scoring metrics,
    the objective columns (names, weights))."""
    reward_fns, weights = [c for c, _ in st.rewards], [w for _, w in st.rewards]
    objectives, n_failed = unscore_failed(b, *compute_rewards(reward_fns, b.texts, b.rows))  # reward: [N, K]
    b, obj, names, w, lm = length_shaping(
        b, objectives, st.reward_names, weights, st.slots, st.settings.max_new_tokens, acc
    )  # length
    b, sm = objective_scores(b, obj, names, w, st.slots, acc)  # objectives: b.scores [N]
    if reads_greedy(st):  # ReMax's baseline: a greedy completion per prompt (zoo/step/greedy.py)
        b = with_greedy_score(st, b, rows, n_groups)
    b = run_stages(st.slots.stages, "reward", b)  # plugin stages after reward
    keep = keep_rows(per_row_metrics(objectives, st.reward_names, b.scores, acc), b.group_ids, st.slots)  # filter
    return b, keep, (objectives, n_failed, {**sm, **lm}, (names, w))


def _forwards(st: RunState, batch: Batch, hooks: Hooks) -> tuple[Batch, Tensor | None]:
    """The rollout forwards of the kept rows: old / reference log-probs [N, T], critic values (what some
    component reads), a distill: variant's teacher log-probs, then the plugin stages after forwards.
    Returns (batch, epoch 0's minibatch order or None)."""
    # epoch 0's minibatch order, drawn here (as update would) so that the first minibatch's old log-probs
    # come from its training forward, not a forward of their own (zoo.step.forwards.reuses_old)
    order = first_order(batch.size, st.settings) if batch.size and reuses_old(st.slots, st.settings) else None
    if batch.size:
        with hooks.phase("forward"):
            batch = rollout_forwards(batch, st.models, st.slots, st.settings, hooks, order)  # forwards
            if st.teacher is not None:  # a distill: variant's teacher scores the sampled tokens
                batch = score_teacher(
                    batch, st.teacher, st.cfg.teacher, st.models.tokenizer, st.settings, st.slots.reads(VOCAB_FIELD)
                )
            batch = run_stages(st.slots.stages, "forwards", batch)  # plugin stages after forwards
    return batch, order


def _advantages(
    st: RunState, batch: Batch, coefs: dict[str, dict[str, float]], hooks: Hooks
) -> tuple[Batch, dict[str, float]]:
    """kl_reward -> advantage -> normalize -> the teacher's signal -> plugin stages: batch.advantages
    [N, T]. Returns (batch, their metrics). A rank without rows joins the other ranks' collectives."""
    if batch.size:
        with hooks.phase("advantage") as ph:
            ph.batch = batch
            batch, km = kl_reward(batch, st.slots, coefs)  # kl_reward: batch.kl_reward [N, T]
            batch = advantage(batch, st.slots)  # advantage
            batch, am = normalize(batch, st.slots)  # normalize
            batch, dm = distill(batch, st.slots)  # the teacher's signal, after the normalizer
            am.update(dm)
            batch = run_stages(st.slots.stages, "advantage", batch)  # plugin stages after advantage
        return batch, {**km, **am}
    if dist.is_distributed():
        normalize_global(st.slots.normalizer, *empty_rows(st.device))  # join the other ranks' gather
        distill_empty(st.slots)  # join the other ranks' sum of the teacher's signal
    return batch, {}


def _train(
    st: RunState, batch: Batch, coefs: dict[str, dict[str, float]], order: Tensor | None, hooks: Hooks
) -> dict[str, float]:
    """The update (policy and critic; only the critic during `critic_warmup`), then what follows an
    applied optimizer step: the generator's `sync(policy)`, an ema teacher's update; the critic's LR
    schedule. Returns the update's metrics (+ critic/warmup, time/sync)."""
    warmup = st.step < st.variant.critic_warmup  # value pretraining: the critic alone trains (policy frozen)
    with hooks.phase("train"):
        m = update(
            batch,
            st.models,
            st.slots,
            st.settings,
            st.optimizer,
            st.scheduler,
            coefs,  # update
            critic_optimizer=st.critic_optimizer,
            hooks=hooks,
            train_policy=not warmup,
            order=order,
        )
    if st.variant.critic_warmup:
        m["critic/warmup"] = float(warmup)  # 1 while only the critic trains
    if st.generator is not None and not warmup and m.get("optim/updates", 0) > 0:  # the policy changed: sync
        ts = time.perf_counter()
        st.generator.sync(st.models.policy)
        m["time/sync"] = time.perf_counter() - ts  # part of time/train
    if st.teacher is not None and not warmup and m.get("optim/updates", 0) > 0:
        st.teacher.after_update(st.models.policy)  # an ema teacher follows the policy
    if st.critic_scheduler is not None:
        for _ in range(st.settings.epochs * st.settings.minibatches):
            st.critic_scheduler.step()
    return m


def _controllers(st: RunState, m: dict[str, Any], batch: Batch) -> None:
    """The controllers see the step's metrics and move their coefficients; what the next step uses
    (e.g. kl/beta, entropy_bonus/coef) and the LR go into the metrics."""
    tokens = float(batch.loss_mask.sum()) if batch.size else 0.0
    for c in st.controllers:  # controllers
        c.update(m, tokens, float(batch.size))
    for target, params in coefficients(st).items():  # what the next step uses, e.g. kl/beta, entropy_bonus/coef
        m.update({f"{target}/{k}": v for k, v in params.items()})
    m["optim/lr"] = float(st.scheduler.get_last_lr()[0])


def _reference_reset(st: RunState, m: dict[str, Any]) -> None:
    """Every `ref_reset_every` steps (counted after this one) the reference becomes the policy."""
    if st.cfg.ref_reset_every and st.reference is not None and st.step % st.cfg.ref_reset_every == 0:
        reset_reference(st.reference, st.models.policy)  # reference reset
        m["kl/ref_resets"] = float(st.reference.resets)


def coefficients(st: RunState) -> dict[str, dict[str, float]]:
    """{target: {hyperparameter: value}}: the coefficients the variant states (`Slots.coefficients`:
    the kl: slot's beta) with what the run's controllers set now on top (targets by component name)."""
    out = {t: dict(p) for t, p in st.slots.coefficients().items()}
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
