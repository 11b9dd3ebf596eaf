"""ReMax's greedy baseline (arXiv 2310.10505 §3, Alg. 1): one greedy completion per prompt, scored like
the sampled ones, written as `Batch.extras["greedy_score"]` [N] for the `remax` estimator. Runs in a
resampling round after the objectives stage, only when the variant's estimator reads the field
(zoo/core/fields.py), so no other variant pays for it.

The greedy row goes through the run's rewards, length shaping and objective weights exactly as a
sampled row; the objective normaliser sees each greedy row as a group of one (with `group_zscore`
that makes the baseline 0: use `objective_norm: none`, as the `remax` variant does). Single-turn only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from zoo.backends.generate.backend import generate_rows
from zoo.backends.generate.hf_generator import HFGenerator
from zoo.config.run import GENERATE_BATCH
from zoo.core.batch import Batch
from zoo.core.fields import declared_reads
from zoo.core.generator_types import SamplingParams
from zoo.envs.run import has_env, unscore_failed
from zoo.rewards.compute import accuracy_index, compute_rewards
from zoo.step.forwards import autocast
from zoo.step.scoring import length_shaping, objective_scores
from zoo.step.types import RunState

FIELD = "greedy_score"


def reads_greedy(st: RunState) -> bool:
    """Whether the variant's estimator reads the greedy baseline."""
    return FIELD in declared_reads(st.slots.advantage)


def with_greedy_score(st: RunState, b: Batch, rows: list[dict[str, Any]], group_offset: int) -> Batch:
    """`b` (the round's rows, group id = `group_offset` + prompt index into `rows`) with
    extras["greedy_score"] [N]: each row's prompt's greedy completion scored. Raises ValueError in a
    multi-turn run (an environment's turns have no single greedy completion here)."""
    if has_env(st.cfg):
        raise ValueError("advantage 'remax': the greedy baseline is drawn for single-turn tasks only (task.env is set)")
    s = st.settings
    gen = (
        st.generator
        if st.generator is not None
        else HFGenerator(st.models.policy, st.models.tokenizer, getattr(st.models, "processor", None))
    )
    sampling = SamplingParams(
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        do_sample=False,
        micro_batch=s.generate_batch or GENERATE_BATCH,
    )
    with autocast(s.autocast, st.device):
        g = generate_rows(gen, rows, 1, sampling)  # [P] rows, prompt-major
    g = replace(g, rows=list(rows), group_ids=torch.arange(len(rows)))
    fns, weights = [c for c, _ in st.rewards], [w for _, w in st.rewards]
    objectives, _ = unscore_failed(g, *compute_rewards(fns, g.texts, g.rows))
    acc = accuracy_index(fns)
    g, obj, names, w, _ = length_shaping(g, objectives, st.reward_names, weights, st.slots, s.max_new_tokens, acc)
    g, _ = objective_scores(g, obj, names, w, st.slots)
    prompt = (b.group_ids - group_offset).to(g.scores.device)  # [N] index into rows
    return replace(b, extras={**b.extras, FIELD: g.scores[prompt].to(b.scores.dtype)})
