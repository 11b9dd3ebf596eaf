"""Opening and closing an `async:` run's rollout workers (docs/guides/async.md): the workers (threads
of this process or Ray actors, `async.backend`), the pacing (zoo/step/pacing.py) and the producer
that drives them (zoo/step/producer.py), started after a resume has restored the run.

    open_rollouts(st, state.get("async") if state else None)   # zoo.run.trainer, after folder.restore
    ...
    close_rollouts(st)

A checkpoint keeps the queue (`Pacer.state_dict`): the prompt stream's position before the first
untrained step and the slots dispatched but not trained ([step, group, version]). A resume puts the
stream back there and dispatches those slots again in order, so they get the same prompts and seeds and
are regenerated with the resumed weights; their number is logged as `async/regenerated` with the first
resumed step.
"""

from __future__ import annotations

import logging
from typing import Any

from zoo.config.run import async_opts
from zoo.core.generator_types import SamplingParams
from zoo.models.forward import inner_lm
from zoo.step.pacing import Pacer
from zoo.step.producer import Producer, published
from zoo.step.simulated import SimulatedProducer
from zoo.step.types import RunState

log = logging.getLogger(__name__)


def _workers(st: RunState, n: int, backend: str) -> list[Any]:
    """`n` rollout workers holding copies of the policy's architecture (weights come with version 0)."""
    import torch

    from zoo.backends.generate.rollout_worker import RolloutWorker

    lm, tok = inner_lm(st.models.policy), st.models.tokenizer
    config, gc = lm.config, lm.generation_config  # the policy's stop ids (e.g. the arms: model's)
    dtype = next(st.models.policy.parameters()).dtype
    if backend == "ray":
        from zoo.backends.generate.ray_worker import RayWorker, init_local_ray

        init_local_ray(num_cpus=n)
        return [RayWorker(config, tok, dtype, threads=1, generation_config=gc) for _ in range(n)]
    device = st.device if st.device.type != "cuda" else torch.device("cuda", torch.cuda.current_device())
    return [RolloutWorker(config, tok, dtype, generation_config=gc).to_device(device) for _ in range(n)]


def _sampling(st: RunState) -> SamplingParams:
    """What every group is sampled with (as the synchronous step's `generate`, zoo/step/sample.py)."""
    from zoo.config.run import GENERATE_BATCH

    cfg, s, G = st.cfg, st.settings, st.variant.group_size
    return SamplingParams(
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_p=cfg.sampling.top_p,
        micro_batch=s.generate_batch or max(G, GENERATE_BATCH),
        min_new_tokens=s.max_new_tokens if cfg.sampling.ignore_eos else 0,
    )


def open_rollouts(st: RunState, saved: dict[str, Any] | None = None) -> None:
    """Start the workers of an `async:` run (nothing for a synchronous one) at step `st.step`; `saved`:
    the checkpoint's queue (`Pacer.state_dict`) on a resume."""
    a = async_opts(st.cfg)
    if a is None:
        return
    if saved is not None and saved.get("stream") is not None:
        st.stream.load_state_dict(saved["stream"])  # before the first untrained step's prompts
    pacer = Pacer(
        groups_per_step=st.cfg.budget.prompts_per_step,
        max_staleness=a.max_staleness,
        seed=st.cfg.seed,
        take_rows=st.stream.take,
        stream_state=st.stream.state_dict,
        start_step=st.step,
    )
    if a.backend == "simulated":  # one worker used inline: step s samples with version s - k; a resume gets
        worker = _workers(st, 1, "thread")[0]  # back the ring's older versions (staleness stays exact)
        p: Any = SimulatedProducer(worker, pacer, st.variant.group_size, _sampling(st), saved)
    else:
        p = Producer(_workers(st, a.workers, a.backend), pacer, st.variant.group_size, _sampling(st))
    if saved is not None:
        n = len(saved.get("pending") or [])
        p.pending_metrics["async/regenerated"] = float(n)
        log.warning("async: %d group(s) dispatched before the checkpoint are regenerated from their seeds", n)
    p.start(published(st.models.policy, st.step))
    st.rollouts = p


def close_rollouts(st: RunState) -> None:
    """Stop the workers (after the group each is generating)."""
    if st.rollouts is not None:
        st.rollouts.close()
        st.rollouts = None
