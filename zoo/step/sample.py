"""The generate stage and the resampling rounds around the step's first stages (generate -> reward
-> length -> objectives -> filter, each called by `zoo.step.pipeline.step`), until the step holds
`budget.prompts_per_step` groups or the resample cap is reached (DAPO Alg. 1's "refill the batch",
arXiv:2503.14476).

Sampling filters drop whole groups before any further forward pass. Round 0 draws from the run's
prompt stream, later rounds from their own stream, so step k's first-round prompts are the same in
every arm of a study (paired comparison) whatever the filters dropped."""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Any, Iterator

import torch

from zoo.backends.generate.backend import generate_rows
from zoo.backends.generate.hf_generator import HFGenerator
from zoo.config.run import GENERATE_BATCH
from zoo.core import dist
from zoo.core.batch import Batch, concat
from zoo.core.generator_types import SamplingParams
from zoo.core.guards import NONFINITE_SAMPLING, nonfinite_sampling
from zoo.envs.run import conversation, env_metrics, has_env, run_rollout
from zoo.rewards.compute import accuracy_metrics
from zoo.step.diagnostics import gold_metrics
from zoo.step.forwards import autocast
from zoo.step.types import RunState


def generate(st: RunState, rows: list[dict[str, Any]], group_offset: int) -> Batch:
    """G completions for each dataset row's prompt from the run's generator (`st.generator`, built from
    `sampling.backend`) -> Batch with logp_rollout (group ids start at `group_offset`)."""
    cfg, s, G = st.cfg, st.settings, st.variant.group_size
    gen = (
        st.generator
        if st.generator is not None
        else HFGenerator(st.models.policy, st.models.tokenizer, getattr(st.models, "processor", None))
    )
    sampling = SamplingParams(
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_p=cfg.sampling.top_p,
        micro_batch=s.generate_batch or max(G, GENERATE_BATCH),  # sampling.batch_size
        min_new_tokens=s.max_new_tokens if cfg.sampling.ignore_eos else 0,
    )
    with autocast(s.autocast, st.device):
        try:
            if has_env(cfg):  # multi-turn: the task's environment answers each turn (zoo/envs/rollout.py)
                return run_rollout(st, gen, rows, group_offset, sampling)
            b = generate_rows(gen, rows, G, sampling)  # with the rows' images, if any (zoo.core.media)
        except RuntimeError as e:  # torch.multinomial on NaN/inf probabilities: name the likely key
            if NONFINITE_SAMPLING not in str(e):
                raise
            raise nonfinite_sampling(
                f"step {st.step + 1}",
                cfg,
                temperature=s.temperature,
                temperature_key="sampling.temperature",
                updated=st.guard.updates != 0,
            ) from None
    # a fresh rollout is prompt-major: group id = index of the prompt in `rows`
    return replace(b, rows=[rows[i] for i in b.group_ids.tolist()], group_ids=b.group_ids + group_offset)


class Rounds:
    """The resampling rounds of one step (DAPO Alg. 1's "refill the batch"): which prompts each round
    generates for, the rows the filters kept, the round-0 metrics and samples, the totals. The stages
    of a round (generate, reward, length, objectives, filter) are called by `zoo.step.pipeline.step`:

        rounds = Rounds(st)
        for rows in rounds:          # round 0, then more while the filters left groups to refill
            ...                      # the round's stages
            rounds.add(b, keep)
        batch, metrics = rounds.finish()

    Iterating is a collective under data parallelism (the ranks decide together when to stop)."""

    def __init__(self, st: RunState) -> None:
        self.st = st
        self.p_local = max(1, st.cfg.budget.prompts_per_step // dist.world_size())
        self.kept: list[Batch] = []
        self.n_kept = self.n_groups = self.rounds = 0
        self.index = -1  # the current round
        self.metrics: dict[str, Any] = {}  # round 0's
        self.samples: list[dict[str, Any]] = []  # round 0's completions with their reward columns
        self.objective_columns: tuple[list[str], list[float]] = (list(st.reward_names), [w for _, w in st.rewards])
        self.times = {"generate": 0.0, "score": 0.0}
        self.local_done = [0.0, 0.0]  # completions, tokens generated on this rank
        self.last: Batch | None = None

    @property
    def first(self) -> bool:
        """Whether the current round is round 0 (its rows describe the step's reward metrics)."""
        return self.index == 0

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        st = self.st
        for rnd in range(st.cfg.budget.max_resample_rounds + 1):
            # every rank takes the same rows from the stream (it stays in lockstep, so one saved position
            # serves all ranks) and keeps its own disjoint slice; the ranks decide together when to stop
            needs = [int(n) for n in dist.per_rank(self.p_local - self.n_kept)]
            if rnd > 0 and (not st.slots.filter or sum(needs) == 0):
                break
            self.rounds += 1
            start = sum(needs[: dist.rank()])
            source = st.stream if rnd == 0 else st.resample_stream
            rows = source.take(sum(needs))[start : start + needs[dist.rank()]]
            if not rows:
                continue
            self.index = rnd
            yield rows

    @contextlib.contextmanager
    def timed(self, what: str) -> Iterator[None]:
        """Adds the time of the block to time/<what> ("generate" or "score")."""
        t0 = time.perf_counter()
        yield
        self.times[what] += time.perf_counter() - t0

    def record_first(
        self,
        b: Batch,
        objectives: torch.Tensor,
        n_failed: list[int],
        metrics: dict[str, float],
        columns: tuple[list[str], list[float]],
    ) -> None:
        """Round 0's metrics: the objectives' and length shaping's `metrics`, accuracy, completion, env and
        gold metrics, the share of unscored rows; its samples; the objective `columns` (names, weights)
        the diagnostics correlate. objectives: [N, K] raw reward columns."""
        st, reward_fns = self.st, [c for c, _ in self.st.rewards]
        self.metrics = {
            **metrics,
            **accuracy_metrics(objectives, reward_fns),
            **_completion_metrics(b),
            **env_metrics(b),
            **gold_metrics(st.gold, b.texts, b.rows),
        }
        self.metrics["reward/unscored_frac"] = max(n_failed, default=0) / max(b.size, 1)  # the worst reward's
        self.objective_columns = (list(columns[0]), list(columns[1]))
        self.samples = [
            {
                "prompt": r.get("question", ""),
                "completion": conversation(r, t),
                **{n: float(objectives[i, k]) for k, n in enumerate(st.reward_names)},
            }
            for i, (t, r) in enumerate(zip(b.texts, b.rows))
        ]

    def add(self, b: Batch, keep: torch.Tensor) -> None:
        """The round's rows `b` and the filters' verdict `keep` [N] bool (whole groups)."""
        self.last = b
        self.local_done[0] += b.size
        self.local_done[1] += float(b.policy_tokens.sum())
        self.n_groups += int(len(torch.unique(b.group_ids)))
        if bool(keep.any()):
            kb = b.select(keep)
            self.kept.append(kb)
            self.n_kept += int(len(torch.unique(kb.group_ids)))

    def finish(self) -> tuple[Batch, dict[str, Any]]:
        """The kept rows of every round (one Batch) and the step's sampling metrics: round 0's and
        groups/kept_frac (over all rounds), groups/dropped, groups/rounds, time/generate, time/score.
        Adds the completions and tokens generated on all ranks to the run's totals (a collective)."""
        st = self.st
        done = dist.all_reduce_sum(torch.tensor(self.local_done, dtype=torch.float64))
        st.totals["completions"] += float(done[0])
        st.totals["tokens"] += float(done[1])
        batch = concat(self.kept, int(st.models.tokenizer.pad_token_id)) if self.kept else self.last.select([])
        m = dict(self.metrics)
        m.update(
            {
                "groups/kept_frac": self.n_kept / max(self.n_groups, 1),
                "groups/dropped": float(self.n_groups - self.n_kept),
                "groups/rounds": float(self.rounds),
                "time/generate": self.times["generate"],
                "time/score": self.times["score"],
            }
        )
        return batch, m


def _completion_metrics(b: Batch) -> dict[str, float]:
    return {
        "completion/len_mean": float(b.policy_tokens.float().mean()),
        "completion/len_max": float(b.policy_tokens.max()),
        "completion/truncated_frac": float(b.truncated.float().mean()),
    }
