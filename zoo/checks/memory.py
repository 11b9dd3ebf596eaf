"""The step's rollout fits in the memory of the run's device (zoo.checks.memory_estimate: token rows, KV
cache, logits), from the model's config.json alone."""

from __future__ import annotations

from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import AfterLoad
from zoo.config.variant import VariantError


def generate_rows(cfg: Any, group_size: int) -> int:
    """Rows of one generate call, as the step batches them: `sampling.batch_size`, default max(G, 32)."""
    from zoo.config.run import generate_batch_size

    return generate_batch_size(cfg, group_size)


def kv_bytes(cfg: Any) -> int:
    """Bytes per cached key/value: 2 under bf16/fp16 autocast, else the weights' dtype's."""
    if cfg.model_opts.autocast in ("bf16", "fp16"):
        return 2
    return {"float32": 4, "bfloat16": 2, "float16": 2}[cfg.model_opts.dtype]


@check("memory_estimate", "after_load")
def memory_estimate(s: AfterLoad, rep: Report) -> None:
    """`check_rollout_fits` against `s.available` bytes (skipped when unknown); the estimate goes to
    `s.estimate`."""
    from zoo.checks.memory_estimate import check_rollout_fits

    if s.available is None:
        return
    g = s.variant.group_size
    try:
        s.estimate = check_rollout_fits(
            s.cfg, g, generate_rows(s.cfg, g), s.model_config, s.prompt_tokens, kv_bytes(s.cfg), s.available
        )
    except VariantError as e:
        rep.errors.append(str(e))
