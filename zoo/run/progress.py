"""What a run shows and measures around its steps: the held-out evaluator and the progress bar."""

from __future__ import annotations

import contextlib
import json
import math
import time
from typing import Any, Callable, Iterator

import torch

from zoo.backends.generate import progress as step_progress
from zoo.backends.generate.backend import build_generator, eval_generator
from zoo.backends.generate.hf_generator import HFGenerator
from zoo.backends.train import strategy
from zoo.core import dist
from zoo.core.declarations import of as declared
from zoo.core.guards import NONFINITE_SAMPLING, no_update_reason, nonfinite_sampling
from zoo.envs.base import env_spec
from zoo.run.eval_before import computing, initial_policy, lora_at_init
from zoo.run.eval_record import CACHE_DIR, cache_key, prompt_id, read_cached, write_cached, write_record
from zoo.run.evaluate import evaluate
from zoo.step.forwards import autocast
from zoo.step.types import RunState


def _with_processor(st: RunState) -> dict[str, Any]:
    """`build_generator`'s processor keyword for a vision-language policy; none for text (called as before)."""
    processor = getattr(st.models, "processor", None)
    return {} if processor is None else {"processor": processor}


def evaluator(st: RunState, announce: bool = False) -> Callable[..., dict[str, float] | None]:
    """The run's held-out evaluation ({} when disabled or without a correctness reward). With
    `announce` it says on stderr what it evaluates and what it measured (the pause before the first
    step and after the last is the evaluation)."""
    cfg = st.cfg
    correctness = next((c for c, _ in st.rewards if declared(c).accuracy), None)  # the reward that judges it
    if not cfg.eval.enabled or cfg.eval.size == 0 or correctness is None or not st.task.eval:
        return lambda before=None: {}
    rows = st.task.eval[: cfg.eval.size]
    own = cfg.eval.backend is not None  # a generator of its own, else the run's (a wrapper's inner)
    gen = (
        build_generator(cfg.eval.backend, st.models.policy, st.models.tokenizer, **_with_processor(st))
        if own
        else eval_generator(
            st.generator
            if st.generator is not None
            else HFGenerator(st.models.policy, st.models.tokenizer, getattr(st.models, "processor", None))
        )
    )
    return _Evaluation(st, announce, correctness, rows, own, gen)


class _Evaluation:
    """The evaluation `evaluator` returns: call it at the run's step, or with `before` (see `__call__`)."""

    def __init__(self, st: RunState, announce: bool, correctness: Any, rows: list[dict], own: bool, gen: Any):
        self.st, self.announce, self.correctness, self.rows, self.own, self.gen = (
            st,
            announce,
            correctness,
            rows,
            own,
            gen,
        )

    def compute(self, scores: dict[str, float | None], when: str) -> dict[str, float]:
        st, cfg, gen = self.st, self.st.cfg, self.gen
        strategy.gather_weights(st.models.parallel)  # fsdp: ranks may generate different numbers of tokens
        if self.own:  # the run's generator is synced by the step after each update; this one here
            gen.sync(st.models.policy)
        with autocast(st.settings.autocast, st.device), nonfinite_sampling_named(st, f"eval {when}"):
            res = evaluate(
                gen,
                st.models.tokenizer,
                self.rows,
                self.correctness,
                max_new_tokens=cfg.budget.max_new_tokens,
                samples=cfg.eval.samples,
                temperature=cfg.eval.temperature,
                seed=cfg.eval.seed,
                batch_size=cfg.eval.batch_size,
                device=st.device,
                env=env_spec(cfg.task),
                per_prompt=scores,
            )
        strategy.release_weights(st.models.parallel)
        return res

    def shared_before(self, key: str, parts: dict, scores: dict, before: str) -> tuple[dict | None, bool]:
        """(the study's evaluation before training, whether it was read from the cache); (None, False) when
        this arm defers it (`before` "defer" and another arm computes it: zoo.run.eval_before)."""
        st, gen = self.st, self.gen
        study_dir = st.cfg.out_dir().parent
        if (cached := read_cached(study_dir, key)) is not None:
            return _cached_into(cached, scores), True
        if dist.is_distributed():  # every rank evaluates (fsdp gathers the weights); rank 0 keeps it
            res = self.compute(scores, "before training")
            if dist.rank() == 0 and res:
                write_cached(study_dir, key, res, scores, parts)
            return res, False
        defer = before == "defer" and not self.own and isinstance(gen, HFGenerator) and lora_at_init(st.models.policy)
        with computing(study_dir, key, wait=not defer) as held:
            if not held:
                return None, False
            if (cached := read_cached(study_dir, key)) is not None:  # the other arm finished while we waited
                return _cached_into(cached, scores), True
            with initial_policy(st.models.policy) if before == "late" else contextlib.nullcontext():
                res = self.compute(scores, "before training")
            if res:
                write_cached(study_dir, key, res, scores, parts)
            return res, False

    def __call__(self, before: str | None = None) -> dict[str, float] | None:
        """The evaluation at the run's step; `before` "defer" (at step 0: None when another arm computes the
        study's shared one, see zoo.run.eval_before) or "late" (after training: the evaluation before it)."""
        st, cfg, rows = self.st, self.st.cfg, self.rows
        # from the run's step, not a count of calls: a resumed process's first call is not "before"
        phase = "before" if before or st.step == 0 else "after" if st.step >= cfg.budget.steps else None
        when = f"{phase} training" if phase else f"at step {st.step}"
        if self.announce:
            from rich.console import Console

            console = Console(stderr=True)
            console.print(f"eval ({when}): {len(rows)} held-out prompts ...", highlight=False, end=" ")
        shared = phase == "before" and bool(cfg.study)  # a study's arms share the eval before training
        key, parts = before_key(st, rows, self.gen) if shared else ("", {})
        scores: dict[str, float | None] = {}
        cached = False
        if shared:
            res, cached = self.shared_before(key, parts, scores, before or "wait")
            if res is None and not cached and before == "defer":
                if self.announce:
                    console.print(
                        "deferred: another arm computes it; this arm reads it after training", highlight=False
                    )
                return None
            res = res or {}
        else:
            res = self.compute(scores, when)
        if phase and dist.rank() == 0 and scores:
            write_record(cfg.out_dir(), phase, scores)
        if self.announce:
            console.print(
                "  ".join(
                    f"{k.removeprefix('eval/')} {res[k]:.3f}"
                    for k in ("eval/greedy_acc", "eval/avg_at_k")
                    if isinstance(res.get(k), float)
                )
                + (f"  (shared with the study's other arms: {CACHE_DIR}/{key}.json)" if cached else ""),
                highlight=False,
            )
        return res


@contextlib.contextmanager
def nonfinite_sampling_named(st: RunState, where: str) -> Iterator[None]:
    """Turn torch's "probability tensor contains either inf, nan or element < 0" from the evaluation's
    sampling into one RunFailed naming `where` and the likely key (zoo.core.guards.nonfinite_sampling)."""
    try:
        yield
    except RuntimeError as e:
        if NONFINITE_SAMPLING not in str(e):
            raise
        raise nonfinite_sampling(
            where,
            st.cfg,
            temperature=st.cfg.eval.temperature,
            temperature_key="eval.temperature",
            updated=st.guard.updates != 0,
        ) from None


def _cached_into(cached: dict[str, Any], scores: dict[str, float | None]) -> dict[str, float]:
    """A cached evaluation's metrics; its per-prompt scores copied into `scores`."""
    scores.update(cached["scores"])
    return dict(cached["metrics"])


def before_key(st: RunState, rows: list[dict], gen: Any) -> tuple[str, dict[str, Any]]:
    """The cache key of the run's evaluation before training and its parts: the model and its options,
    the eval rows (ids), the eval settings, max_new_tokens, the generator, the task's environment, the
    reward that judges the answers (as configured: two arms scoring with different rewards or reward
    parameters do not share it), the resolved precision and the torch thread count (zoo.run.eval_record)."""
    cfg = st.cfg
    judge = next((i for i, (c, _) in enumerate(st.rewards) if declared(c).accuracy), None)
    judge_spec = json.loads(json.dumps(list(cfg.rewards)[judge], default=str)) if judge is not None else None
    parts = {
        "model": cfg.model,
        "model_opts": cfg.model_opts.model_dump(mode="json"),
        "rows": [prompt_id(r) for r in rows],
        "eval": cfg.eval.model_dump(mode="json", exclude={"every"}),
        "max_new_tokens": cfg.budget.max_new_tokens,
        "generator": type(gen).__name__,
        "backend": cfg.eval.backend if cfg.eval.backend is not None else cfg.sampling.backend,
        "env": cfg.task.get("env"),
        "judge": judge_spec,
        "precision": str(st.settings.autocast),
        "threads": torch.get_num_threads(),
    }
    return cache_key(parts), parts


#: the metrics of `zoo run`'s line per step, in order (those the step logged)
STEP_LINE_KEYS = (
    "reward/total",
    "accuracy",
    "groups/signal_frac",
    "groups/correct_signal_frac",
    "loss/policy",
    "kl/ref",
    "entropy",
    "clip/low_frac",
    "clip/high_frac",
    "completion/len_mean",
    "time/step",
    "perf/peak_mem_mb",
    "async/staleness_mean",  # an `async:` run's groups: steps since their policy version (zoo.step.pacing)
    "async/staleness_max",
)


def step_line(step: int, m: dict[str, Any]) -> str:
    """`zoo run`'s line for step `step` with metrics `m` (each of STEP_LINE_KEYS the step logged, so the
    staleness only for an `async:` run). A step that trained no token logs NaN token
    statistics (entropy, clip/*: a mean over no token is undefined, zoo.step.update.TokenTally); the line
    then says why, e.g. "(nothing trained: every group was filtered out by the sampling filter; entropy,
    clip/low_frac, clip/high_frac NaN: a mean over no token)"."""
    line = f"step {step:>3} " + "  ".join(f"{k} {m[k]:.4g}" for k in STEP_LINE_KEYS if k in m)
    undefined = [k for k in ("entropy", "clip/low_frac", "clip/high_frac") if k in m and math.isnan(float(m[k]))]
    if undefined or float(m.get("optim/updates", 1.0)) == 0:
        reason = no_update_reason(m) or "no completion token was left in the loss"
        nan = f"; {', '.join(undefined)} NaN: a mean over no token" if undefined else ""
        line += f"  (nothing trained: {reason}{nan})"
    return line


class progress_bar:
    """A rich progress bar with step, reward and ETA, plus one metrics line per step. Inside a step it
    listens to the generator's chunk reports (zoo.backends.generate.progress): the bar shows "generating d/N", and a
    line "step k: generated d of N completions" is printed at most every `inner_every` seconds (so a
    log file shows a long step moving too)."""

    inner_every = 30.0  # seconds between the printed progress lines inside one step

    def __init__(self, enabled: bool, total: int, start: int):
        self.enabled, self.total, self.start = enabled, total, start
        self.step, self._printed = start, 0.0

    def __enter__(self):
        if not self.enabled:
            return lambda step, m: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.p = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.p.__enter__()
        self.task = self.p.add_task("train", total=self.total, completed=self.start, info="")
        self._listen = step_progress.listening(self.inner)
        self._listen.__enter__()
        self._printed = time.monotonic()

        def update(step: int, m: dict[str, Any]) -> None:
            self.step = step
            info = f"reward {m.get('reward/total', float('nan')):.3f} acc {m.get('accuracy', float('nan')):.2f}"
            self.p.update(self.task, completed=step, info=info)
            self.p.console.print(
                step_line(step, m),
                highlight=False,
                soft_wrap=True,
            )  # one line per step, also in a log file
            self._printed = time.monotonic()

        return update

    def inner(self, phase: str, done: int, total: int) -> None:
        """A report from inside step `self.step + 1` (zoo.backends.generate.progress): `done` of `total` completions
        generated. Updates the bar; prints a line when `inner_every` seconds passed since the last."""
        verb = "generated" if phase == "generate" else phase
        self.p.update(self.task, info=f"{verb} {done}/{total}")
        now = time.monotonic()
        if now - self._printed >= self.inner_every:
            self._printed = now
            # `total` is this generate call's (one resampling round's), not the step's: say so, and say when
            # the call is done, so "12 of 12" does not read as a count of what a filter kept
            state = "done, scoring next" if done >= total else f"{total - done} to go"
            self.p.console.print(
                f"step {self.step + 1:>3}: {verb} {done} of this round's {total} completions ({state})",
                highlight=False,
                soft_wrap=True,
            )

    def __exit__(self, *exc):
        if self.enabled:
            self._listen.__exit__(*exc)
            self.p.__exit__(*exc)
        return False
