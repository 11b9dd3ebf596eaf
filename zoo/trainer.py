"""`zoo run`: train one variant on one model and task, with checkpoints a restart resumes from.

    summary = train(load_run_config("run.yaml"))

Writes `cfg.out_dir()/{config.yaml, metrics.jsonl, samples.jsonl, summary.json, checkpoint/}`.
The step itself is `zoo.engine`; this module sets up models, data, optimizers and tracking, runs
the loop, and evaluates before and after.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import yaml

from zoo import checkpoint as ckpt
from zoo import dist, engine
from zoo.batch import Batch, concat
from zoo.components.kl import adaptive_beta
from zoo.config import RunConfig, WandbOpts
from zoo.config_checks import run_warnings
from zoo.evaluate import evaluate
from zoo.provenance import peak_memory_mb, provenance, reset_peak_memory
from zoo.registry import load_plugins
from zoo.rewards.compute import compute_rewards, resolve_rewards
from zoo.rollout import generate_rollout
from zoo.rollout_preflight import check_before_rollout
from zoo.tracking import read_json
from zoo.variant import Variant, VariantError, check_variant, load_variant

log = logging.getLogger(__name__)


#: completions per `generate` call (at least budget.micro_batch and G). Decoding reads every weight once
#: per token whatever the batch, so up to the point where it becomes compute-bound a bigger batch is
#: nearly free (docs/performance.md: 32 rows in one call vs 4 calls of 8); without gradients a row
#: needs only its KV cache, far less than a training forward.
GENERATE_BATCH = 32


@dataclass
class RunState:
    """Everything the loop mutates; what a checkpoint saves."""

    cfg: RunConfig
    variant: Variant
    slots: engine.Slots
    models: engine.Models
    settings: engine.StepSettings
    optimizer: torch.optim.Optimizer
    scheduler: Any
    critic_optimizer: torch.optim.Optimizer | None
    critic_scheduler: Any
    stream: Any
    resample_stream: Any
    task: Any
    rewards: list[tuple[Any, float]]
    reward_names: list[str]
    reference: Any
    device: torch.device
    beta: float
    step: int = 0
    totals: dict[str, float] = field(default_factory=lambda: {"completions": 0.0, "tokens": 0.0, "elapsed": 0.0})
    provenance: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- setup


def effective_variant(cfg: RunConfig) -> Variant:
    """The variant with the run's overrides (`set`) and the budget's group_size/updates applied."""
    v = load_variant(cfg.variant, cfg.set)
    upd: dict[str, Any] = {}
    if cfg.budget.group_size is not None:
        upd["group_size"] = cfg.budget.group_size
    if cfg.budget.updates is not None:
        upd["updates"] = cfg.budget.updates
    return v.model_copy(update=upd)


def validate_run(cfg: RunConfig) -> tuple[Variant, list[str]]:
    """Check the variant against the run before any model loads. Raises VariantError; returns warnings."""
    load_plugins(cfg.plugins)
    v = effective_variant(cfg)
    rep = check_variant(v, {"max_new_tokens": cfg.budget.max_new_tokens})
    n = cfg.budget.prompts_per_step * v.group_size
    if v.updates.minibatches > n:
        rep.errors.append(f"updates.minibatches {v.updates.minibatches} > {n} completions per step "
                          f"(budget.prompts_per_step x group_size)")
    rep.warnings += run_warnings(cfg, v)
    if rep.errors:
        raise VariantError("\n".join(rep.errors))
    return v, rep.warnings


def _scheduler(opt: torch.optim.Optimizer, cfg: RunConfig, total: int):
    warm, kind = cfg.optim.warmup_steps, cfg.optim.schedule

    def factor(i: int) -> float:
        if warm and i < warm:
            return (i + 1) / warm
        if kind == "constant":
            return 1.0
        frac = min(1.0, (i - warm) / max(1, total - warm))
        return 1.0 - frac if kind == "linear" else 0.5 * (1 + math.cos(math.pi * frac))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _adamw(params, lr: float, cfg: RunConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay)


def setup(cfg: RunConfig, device: torch.device | None = None) -> RunState:
    """Load everything one run needs (models last, after every config check has passed)."""
    from zoo import models as zm
    from zoo.tasks import PromptStream, load_task
    from zoo.tasks.base import derive_seed

    v, warnings = validate_run(cfg)
    for w in warnings:
        log.warning(w)
    dist.init_from_env()  # under torchrun / accelerate launch: join the process group
    slots = engine.Slots.of(v, {"max_new_tokens": cfg.budget.max_new_tokens})
    _seed_everything(cfg.seed + dist.rank())
    task = load_task(cfg.task)
    stream = PromptStream(task.train, seed=cfg.seed)
    # extra rounds of dynamic sampling draw from their own stream, so step k's first-round prompts are
    # the same in every arm of a study (paired comparison), whatever the filters dropped before
    resample_stream = PromptStream(task.train, seed=derive_seed(cfg.seed, "resample"))
    rewards = resolve_rewards(cfg.rewards)
    names = [c.name for c, _ in rewards]
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    src = zm.resolve_model(cfg.model)
    lora = cfg.model_opts.lora.model_dump() if cfg.model_opts.lora else None
    policy, tok = zm.load_policy(src, dtype=cfg.model_opts.dtype, lora=lora,
                                 gradient_checkpointing=cfg.model_opts.gradient_checkpointing, device=device)
    check_before_rollout(cfg, v.group_size, max(cfg.budget.micro_batch, v.group_size, GENERATE_BATCH), policy, tok,
                         task.train + task.eval, 2 if cfg.model_opts.autocast in ("bf16", "fp16") else
                         next(policy.parameters()).element_size(), device)
    dist.broadcast_parameters(policy)  # ranks are seeded apart: LoRA's random init must still agree
    reference = zm.make_reference(policy) if slots.kl.placement != "none" else None
    critic = None
    if slots.advantage.meta.get("needs_values"):
        critic = zm.make_critic(policy, lora).to(device)
        dist.broadcast_parameters(critic)
    models = engine.Models(policy=policy, tokenizer=tok, critic=critic,
                           reference=(lambda: zm.reference_forward(reference)) if reference is not None else None)
    s = engine.StepSettings(
        temperature=cfg.sampling.temperature, micro_batch=cfg.budget.micro_batch,
        max_new_tokens=cfg.budget.max_new_tokens, epochs=v.updates.epochs, minibatches=v.updates.minibatches,
        entropy_coef=v.entropy_coef, autocast=cfg.model_opts.autocast, max_grad_norm=cfg.optim.max_grad_norm,
    )
    total = cfg.budget.steps * v.updates.epochs * v.updates.minibatches
    opt = _adamw([p for p in policy.parameters() if p.requires_grad], cfg.optim.lr, cfg)
    copt = _adamw([p for p in critic.parameters() if p.requires_grad], cfg.optim.critic_lr or cfg.optim.lr, cfg) if critic else None
    prov = provenance(cfg, src, {"policy": zm.count_parameters(policy),
                                 "critic": zm.count_parameters(critic) if critic else None})
    return RunState(
        cfg=cfg, variant=v, slots=slots, models=models, settings=s, optimizer=opt,
        scheduler=_scheduler(opt, cfg, total), critic_optimizer=copt,
        critic_scheduler=_scheduler(copt, cfg, total) if copt else None, stream=stream, resample_stream=resample_stream, task=task,
        rewards=rewards, reward_names=names, reference=reference, device=device,
        beta=slots.kl.beta, provenance=prov,
    )


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------- one step


def collect_batch(st: RunState) -> tuple[Batch, dict[str, float]]:
    """Generate, score and filter until the step holds `prompts_per_step` groups (or the resample cap).

    Sampling filters drop whole groups before any further forward pass; reward metrics describe
    every generated completion, `groups/kept_frac` how many groups the filters kept."""
    cfg, s = st.cfg, st.settings
    p_local = max(1, cfg.budget.prompts_per_step // dist.world_size())
    G = st.variant.group_size
    kept: list[Batch] = []
    n_kept = n_groups = 0
    first_metrics: dict[str, float] = {}
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
        with engine.autocast(s.autocast, st.device):
            ro = generate_rollout(st.models.policy, st.models.tokenizer, [r["prompt"] for r in rows], group_size=G,
                                  max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                                  top_p=cfg.sampling.top_p, micro_batch=max(s.micro_batch, G, GENERATE_BATCH),
                                  min_new_tokens=s.max_new_tokens if cfg.sampling.ignore_eos else 0)
        t1 = time.perf_counter()
        b = Batch(prompt_ids=ro.prompt_ids, prompt_mask=ro.prompt_mask, completion_ids=ro.completion_ids,
                  mask=ro.completion_mask, group_ids=ro.group_ids + n_groups, truncated=ro.truncated,
                  lengths=ro.lengths, texts=ro.completion_texts, rows=[rows[i] for i in ro.prompt_index.tolist()])
        objectives, n_failed = compute_rewards([c for c, _ in st.rewards], b.texts, b.rows)
        b, m = engine.score(b, objectives, st.reward_names, [w for _, w in st.rewards], st.slots, s.max_new_tokens)
        per_row = engine.per_row_metrics(objectives, st.reward_names, b.scores)
        keep = engine.keep_rows(per_row, b.group_ids, st.slots)
        t_gen += t1 - t0
        t_score += time.perf_counter() - t1
        if rnd == 0:
            first_metrics = m
            first_metrics["accuracy"] = float(per_row["accuracy"].mean()) if "accuracy" in per_row else float("nan")
            first_metrics["completion/len_mean"] = float(b.lengths.float().mean())
            first_metrics["completion/len_max"] = float(b.lengths.max())
            first_metrics["completion/truncated_frac"] = float(b.truncated.float().mean())
            first_metrics["_samples"] = [  # type: ignore[assignment]
                {"prompt": r.get("question", ""), "completion": t, **{n: float(objectives[i, k]) for k, n in enumerate(st.reward_names)}}
                for i, (t, r) in enumerate(zip(b.texts, b.rows))
            ]
        local_done[0] += b.size
        local_done[1] += float(b.lengths.sum())
        n_groups += int(len(torch.unique(b.group_ids)))
        if bool(keep.any()):
            kb = b.select(keep.nonzero().squeeze(1))
            kept.append(kb)
            n_kept += int(len(torch.unique(kb.group_ids)))
    done = dist.all_reduce_sum(torch.tensor(local_done, dtype=torch.float64))
    st.totals["completions"] += float(done[0])
    st.totals["tokens"] += float(done[1])
    batch = concat(kept, int(st.models.tokenizer.pad_token_id)) if kept else b.select([])
    first_metrics.update({
        "groups/kept_frac": n_kept / max(n_groups, 1),
        "groups/dropped": float(n_groups - n_kept),
        "groups/rounds": float(rounds),
        "time/generate": t_gen,
        "time/score": t_score,
    })
    return batch, first_metrics


def _next_beta(beta: float, kl: Any, m: dict[str, Any], batch: Batch) -> float:
    """The adaptive controller's next beta from the step's mean KL per completion over every rank's
    rows (a collective: every rank calls it, with or without rows). `kl/ref` is a token mean: this
    rank's with KL in the reward, already the step's with KL in the loss; either way the sum over
    ranks of mean x local tokens is the step's KL sum."""
    tokens = float(batch.mask.sum()) if batch.size else 0.0
    part = float(m.get("kl/ref", float("nan"))) * tokens if tokens else 0.0
    kl_sum, n = dist.all_reduce_sum(torch.tensor([part, float(batch.size)], dtype=torch.float64)).tolist()
    if n == 0 or kl_sum != kl_sum:
        return beta
    return adaptive_beta(beta, kl_sum / n, kl.adaptive.target, kl.adaptive.horizon, n)


def train_step(st: RunState) -> dict[str, Any]:
    """One rollout step: collect, forward passes, advantages, updates. Returns its metrics."""
    t0 = time.perf_counter()
    batch, m = collect_batch(st)
    if batch.size == 0:
        m["train/skipped"] = 1.0
        log.warning("step %d: every group was filtered out; no update this step", st.step + 1)
    t1 = time.perf_counter()
    am: dict[str, float] = {}
    if batch.size:
        batch = engine.rollout_forwards(batch, st.models, st.slots, st.settings)
    t2 = time.perf_counter()
    if batch.size:
        batch, am = engine.compute_advantages(batch, st.slots, st.beta)
    elif dist.is_distributed():
        engine.normalize_global(st.slots.normalizer, *engine.empty_rows(st.device))  # join the other ranks' gather
    t3 = time.perf_counter()
    um = engine.update(batch, st.models, st.slots, st.settings, st.optimizer, st.scheduler, st.beta,
                       critic_optimizer=st.critic_optimizer)
    if st.critic_scheduler is not None:
        for _ in range(st.settings.epochs * st.settings.minibatches):
            st.critic_scheduler.step()
    t4 = time.perf_counter()
    m.update(am)
    m.update(um)
    kl = st.slots.kl
    if kl.adaptive is not None:
        st.beta = _next_beta(st.beta, kl, m, batch)
    m["kl/beta"] = st.beta
    m["optim/lr"] = float(st.scheduler.get_last_lr()[0])
    m.update({"time/forward": t2 - t1, "time/advantage": t3 - t2, "time/train": t4 - t3, "time/step": t4 - t0})
    gen_tokens = float(batch.lengths.sum()) if batch.size else 0.0
    m["perf/tokens_per_s"] = gen_tokens / max(t4 - t0, 1e-9)
    m["perf/peak_mem_mb"] = peak_memory_mb(st.device)
    st.totals["elapsed"] += t4 - t0
    m["count/completions"] = st.totals["completions"]
    m["count/tokens"] = st.totals["tokens"]
    m["time/elapsed"] = st.totals["elapsed"]
    st.step += 1
    if st.cfg.ref_reset_every and st.reference is not None and st.step % st.cfg.ref_reset_every == 0:
        from zoo.models import reset_reference

        reset_reference(st.reference, st.models.policy)
        m["kl/ref_resets"] = float(st.reference.resets)
    samples = m.pop("_samples", [])
    out = dist.all_reduce_mean_dict({k: v for k, v in m.items() if isinstance(v, (int, float))})
    out["_samples"] = samples
    return out


# --------------------------------------------------------------------------- checkpoints


def save_checkpoint(st: RunState, out: Path, tracker_id: str | None) -> None:
    rng_ranks = dist.all_gather_object(ckpt.rng_state())  # every rank samples from its own RNG stream
    if dist.rank() != 0:
        return
    state = {
        "step": st.step, "beta": st.beta, "totals": dict(st.totals),
        "policy": ckpt.policy_state(st.models.policy),
        "optimizer": st.optimizer.state_dict(), "scheduler": st.scheduler.state_dict(),
        "critic": ckpt.trainable_state(st.models.critic) if st.models.critic is not None else None,
        "critic_optimizer": st.critic_optimizer.state_dict() if st.critic_optimizer else None,
        "critic_scheduler": st.critic_scheduler.state_dict() if st.critic_scheduler else None,
        "stream": st.stream.state_dict(),
        "resample_stream": st.resample_stream.state_dict(), "rng": ckpt.rng_state(), "rng_ranks": rng_ranks, "tracker_id": tracker_id,
        "reference": _reference_state(st),
    }
    ckpt.save(out / "checkpoint", state)


def _reference_state(st: RunState) -> Any:
    ref = st.reference
    if ref is None or ref.resets == 0:
        return None  # the initial policy: rebuilt from the model source
    if ref.shares_policy:
        from peft import get_peft_model_state_dict

        return {"resets": ref.resets, "adapter": get_peft_model_state_dict(ref.model, adapter_name=ref.adapter)}
    return {"resets": ref.resets, "full": ckpt.policy_state(ref.model)}


def restore_checkpoint(st: RunState, state: dict[str, Any]) -> None:
    st.step, st.beta, st.totals = int(state["step"]), float(state["beta"]), dict(state["totals"])
    ckpt.load_policy_state(st.models.policy, state["policy"])
    st.optimizer.load_state_dict(state["optimizer"])
    st.scheduler.load_state_dict(state["scheduler"])
    if st.models.critic is not None and state.get("critic") is not None:
        ckpt.load_trainable_state(st.models.critic, state["critic"])
        st.critic_optimizer.load_state_dict(state["critic_optimizer"])
        st.critic_scheduler.load_state_dict(state["critic_scheduler"])
    st.stream.load_state_dict(state["stream"])
    if state.get("resample_stream") is not None:
        st.resample_stream.load_state_dict(state["resample_stream"])
    ref = state.get("reference")
    if ref is not None and st.reference is not None:
        from zoo.models import reset_reference

        reset_reference(st.reference, st.models.policy)  # creates the frozen copy / adapter
        if "adapter" in ref:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(st.reference.model, ref["adapter"], adapter_name=st.reference.adapter)
        else:
            st.reference.model.load_state_dict(ref["full"])
        st.reference.resets = int(ref["resets"])
    ranks = state.get("rng_ranks") or []
    ckpt.set_rng_state(ranks[dist.rank()] if len(ranks) == dist.world_size() else state["rng"])


# --------------------------------------------------------------------------- the loop


def resolved_config(st: RunState) -> dict[str, Any]:
    cfg = st.cfg.model_dump(mode="json")
    cfg["resolved_variant"] = {
        "name": st.variant.name, "paper": st.variant.paper, "group_size": st.variant.group_size,
        "updates": st.variant.updates.model_dump(), "entropy_coef": st.variant.entropy_coef,
        "slots": st.variant.resolved({"max_new_tokens": st.cfg.budget.max_new_tokens}),
    }
    cfg["provenance"] = st.provenance
    return cfg


def train(cfg: RunConfig, resume: bool = True, *, progress: bool = True,
          on_step: Callable[[int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run (or resume) one arm to the end. Returns the summary also written to summary.json.

    A failure after setup writes summary.json with status "failed" and re-raises; the last
    checkpoint stays, and calling `train` again resumes from it. Set `ZOO_FAIL_AT_STEP=k` to
    simulate a crash after step k (tests)."""
    from zoo.tracking import Tracker

    out = cfg.out_dir()
    done = _finished_summary(out, cfg) if resume else None
    if done is not None:
        log.warning("%s already finished %d steps; nothing to do (use --fresh to train again)", out, done["steps"])
        return done
    out.mkdir(parents=True, exist_ok=True)
    reset_peak_memory(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    st = setup(cfg)
    main = dist.rank() == 0
    state = ckpt.load(out / "checkpoint") if resume else None
    if state is not None:
        restore_checkpoint(st, state)
        log.info("resumed %s at step %d", out, st.step)
    rcfg = resolved_config(st)
    if main:
        (out / "config.yaml").write_text(yaml.safe_dump(rcfg, sort_keys=False))
    tracker = Tracker.for_run(cfg, config=rcfg, resolved_slots=rcfg["resolved_variant"]["slots"],
                              resume_id=state.get("tracker_id") if state else None) if main else _NullTracker()
    if main:  # records past the checkpoint (or all of them on a fresh start) belong to a lost run
        tracker.truncate_after(st.step if state is not None else -1)
    summary: dict[str, Any] = ({k: v for k, v in read_json(out / "summary.json").items() if k.startswith("eval/before")}
                               if state is not None else {})
    fail_at = int(os.environ.get("ZOO_FAIL_AT_STEP", "0") or 0)
    try:
        evaluate_run = _evaluator(st, announce=progress and main)
        if st.step == 0 and "eval/before" not in summary:
            summary["eval/before"] = evaluate_run()
            if summary["eval/before"]:
                tracker.log({**summary["eval/before"], "eval/phase": 0.0}, step=0)
        last: dict[str, Any] = {}
        with _progress(progress and main, cfg.budget.steps, st.step) as bar:
            while st.step < cfg.budget.steps:
                m = train_step(st)
                samples = m.pop("_samples", [])
                tracker.log(m, step=st.step)
                every = (cfg.tracking.wandb_opts() or WandbOpts()).table_every
                if samples and (st.step % every == 0 or st.step == 1):
                    tracker.log_samples(st.step, samples[:16])
                if cfg.eval.every and st.step % cfg.eval.every == 0 and st.step < cfg.budget.steps:
                    tracker.log(evaluate_run(), step=st.step)
                if st.step % cfg.checkpoint.every == 0 or st.step == cfg.budget.steps:
                    save_checkpoint(st, out, tracker.run_id)
                last = m
                bar(st.step, m)
                if on_step:
                    on_step(st.step, m)
                if fail_at and st.step == fail_at:
                    raise RuntimeError(f"ZOO_FAIL_AT_STEP={fail_at}: simulated crash")
        summary["eval/after"] = evaluate_run()
        if summary["eval/after"]:
            tracker.log({**summary["eval/after"], "eval/phase": 1.0}, step=st.step)
        summary.update({k: v for k, v in last.items()})
        summary.update({"status": "finished", "steps": st.step, "time/total_s": st.totals["elapsed"],
                        "config": rcfg})
        tracker.set_summary({k: v for k, v in summary.items() if k != "config"})
        _write_summary(out, summary)
        tracker.finish(0)
        return summary
    except BaseException as e:  # noqa: BLE001 - record, keep the checkpoint, re-raise
        # Ctrl-C / SIGTERM is not a failure: the run is unfinished and a re-run resumes it
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        summary.update({"status": status, "error": f"{type(e).__name__}: {e}", "steps": st.step,
                        "traceback": traceback.format_exc()[-4000:], "config": rcfg})
        _write_summary(out, summary)
        tracker.finish(1)
        raise


class _NullTracker:
    """What ranks other than 0 log to: nothing (rank 0 writes metrics.jsonl and W&B once)."""

    run_id = None

    def log(self, *a: Any, **kw: Any) -> None: ...

    def log_samples(self, *a: Any, **kw: Any) -> None: ...

    def set_summary(self, *a: Any, **kw: Any) -> None: ...

    def truncate_after(self, *a: Any, **kw: Any) -> int:
        return 0

    def finish(self, *a: Any, **kw: Any) -> None: ...


def _evaluator(st: RunState, announce: bool = False) -> Callable[[], dict[str, float]]:
    """The run's held-out evaluation ({} when disabled or without a correctness reward). With
    `announce` it says on stderr what it evaluates and what it measured (the pause before the first
    step and after the last is the evaluation)."""
    cfg = st.cfg
    correctness = next((c for c, _ in st.rewards if c.name == "correctness"), None)
    if not cfg.eval.enabled or cfg.eval.size == 0 or correctness is None or not st.task.eval:
        return lambda: {}
    rows = st.task.eval[: cfg.eval.size]
    calls = [0]

    def run() -> dict[str, float]:
        if announce:
            from rich.console import Console

            console = Console(stderr=True)
            when = "before training" if calls[0] == 0 else "during/after training"
            console.print(f"eval ({when}): {len(rows)} held-out prompts ...", highlight=False, end=" ")
        calls[0] += 1
        with engine.autocast(cfg.model_opts.autocast, st.device):
            res = evaluate(st.models.policy, st.models.tokenizer, rows, correctness,
                           max_new_tokens=cfg.budget.max_new_tokens, samples=cfg.eval.samples,
                           temperature=cfg.eval.temperature, seed=cfg.eval.seed,
                           micro_batch=max(cfg.budget.micro_batch, 8))
        if announce:
            console.print("  ".join(f"{k.removeprefix('eval/')} {res[k]:.3f}" for k in ("eval/greedy_acc", "eval/avg_at_k")
                                    if isinstance(res.get(k), float)), highlight=False)
        return res

    return run


def _finished_summary(out: Path, cfg: RunConfig) -> dict[str, Any] | None:
    """The summary of a run that already reached `cfg.budget.steps`, else None."""
    s = read_json(out / "summary.json")
    return s if s.get("status") == "finished" and int(s.get("steps", -1)) >= cfg.budget.steps else None


def _write_summary(out: Path, summary: dict[str, Any]) -> None:
    if dist.rank() != 0:
        return
    tmp = out / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2, default=str))
    os.replace(tmp, out / "summary.json")


class _progress:
    """A rich progress bar with step, reward and ETA, plus one metrics line per step."""

    def __init__(self, enabled: bool, total: int, start: int):
        self.enabled, self.total, self.start = enabled, total, start

    def __enter__(self):
        if not self.enabled:
            return lambda step, m: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.console = Console(stderr=True)
        self.p = Progress(TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[info]}"),
                          TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console)
        self.p.__enter__()
        self.task = self.p.add_task("train", total=self.total, completed=self.start, info="")

        def update(step: int, m: dict[str, Any]) -> None:
            info = f"reward {m.get('reward/total', float('nan')):.3f} acc {m.get('accuracy', float('nan')):.2f}"
            self.p.update(self.task, completed=step, info=info)
            keys = ["reward/total", "accuracy", "loss/policy", "kl/ref", "entropy", "clip/low_frac", "clip/high_frac",
                    "completion/len_mean", "time/step", "perf/peak_mem_mb"]
            self.p.console.print(f"step {step:>3} " + "  ".join(f"{k} {m[k]:.4g}" for k in keys if k in m), highlight=False,
                                 soft_wrap=True)  # one line per step, also in a log file

        return update

    def __exit__(self, *exc):
        if self.enabled:
            self.p.__exit__(*exc)
        return False
