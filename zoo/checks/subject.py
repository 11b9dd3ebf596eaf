"""What each stage's checks see: the run config and what earlier checks built from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass
class BeforeLoad:
    """cfg: the RunConfig; world_size / launched: the processes the run will have (`WORLD_SIZE`, or
    `zoo validate --nproc N`); origin: where the run's `set:` overrides were written (a study arm's
    `ablations.X.set`), for messages. Filled by the checks: variant (the effective variant), components
    (its built components by slot), rewards (the built reward components), stop."""

    cfg: Any
    world_size: int = 1
    launched: bool = False
    origin: str = "set"
    variant: Any = None
    components: dict[str, Any] | None = None
    rewards: list[Any] | None = None
    stop: bool = False

    def context(self) -> dict[str, Any]:
        """What a component's check reads from the run (group size and updates in use, max_new_tokens)."""
        v, b = self.variant, self.cfg.budget
        return {
            "group_size": b.group_size or v.group_size,
            "updates": b.updates or v.updates,
            "max_new_tokens": b.max_new_tokens,
        }


@dataclass
class AfterLoad:
    """cfg, variant: as in BeforeLoad; model_config: the policy's transformers config (config.json);
    tokenizer: the policy's; rows: the task's prompts (train and eval); available: bytes free on the
    run's device; model: a meta-device model built from model_config (None when it does not build)."""

    cfg: Any
    variant: Any
    model_config: Any
    tokenizer: Any
    rows: Sequence[dict[str, Any]] = ()
    available: int | None = None
    model: Any = None
    prompt_tokens: int = 0
    estimate: dict[str, int] = field(default_factory=dict)
    stop: bool = False
