"""Distillation settings: the variant's `distill:` block (how a teacher's per-token signal enters the
advantage, and which teacher) and the run file's `teacher:` block (the teacher model and what it reads).

    # variant (registry/on_policy_distill.yaml)
    distill: {beta: 1.0, gamma: 0.0, center: true, teacher: model}     # or teacher: {name: ema, alpha: 0.01}
    # run file
    teacher: {model: runs/teacher/model, temperature: 1.0, context: null, batch_size: 8}

The signal (on-policy distillation, Thinking Machines 2025; tinker-cookbook `incorporate_kl_penalty`)
is the sampled token's reverse KL to the teacher, added to the advantage AFTER the normalizer:

    A_t = A_task,t - beta * (logp_old,t - logp_teacher,t)        (then discounted by gamma)

`teacher`: `model` (a separate frozen model, `teacher.model`), or self-distillation (SDFT, Shenfeld et
al. arXiv 2601.19897): `frozen` (the initial policy; with LoRA the adapters-disabled forward), `current`
(the policy now, no gradient) or `ema` (an exponential moving average of the policy, rate `alpha`;
registry kind `teacher`, zoo/models/teacher.py),
each reading `teacher.context` before its prompt. The engine side: zoo/models/teacher.py (the model),
zoo/step/distill.py (scoring, the signal). docs/reference/distillation.md "Distillation".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

from zoo.config.schema import Spec, Strict
from zoo.core.declarations import Declaration

DISTILL_NAME = "distill"


class DistillSpec(Strict):
    """The variant's `distill:` block (null: no teacher signal)."""

    beta: float = Field(1.0, ge=0, description="weight of the reverse-KL signal in the advantage (0: plain RL)")
    gamma: float = Field(
        0.0, ge=0, le=1, description="discount of the signal over later tokens (0: each token its own; tinker)"
    )
    center: bool = Field(
        False, description="subtract the batch's mean signal first (tinker-cookbook incorporate_kl_penalty)"
    )
    teacher: Spec = Field(
        "model",
        description="registry kind teacher: model (the run's teacher.model); frozen, current, "
        "{name: ema, alpha: 0.01} (the policy itself)",
    )

    def teacher_name(self) -> str:
        return str(self.teacher if isinstance(self.teacher, str) else self.teacher.get("name", ""))


class TeacherConfig(Strict):
    """The run file's `teacher:` block: what the teacher is and what it reads."""

    model: str | None = Field(
        None, description="the teacher model (distill.teacher: model); null for self-distillation"
    )
    temperature: float = Field(1.0, gt=0, description="the teacher's logits / temperature")
    context: str | list[dict[str, str]] | None = Field(
        None,
        description="what the teacher reads before its prompt (never the student): text put before the "
        "prompt's tokens, or chat messages [{role, content}] put before the row's prompt messages; formatted "
        "with the task row's fields, e.g. 'Reference answer: {answer}\\n' (zoo/step/teacher_context.py)",
    )
    batch_size: int = Field(8, ge=1, description="rows per teacher forward")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"

    @field_validator("context")
    @classmethod
    def _messages(cls, v: Any) -> Any:
        for i, m in enumerate(v if isinstance(v, list) else []):
            if set(m) != {"role", "content"}:
                raise ValueError(f"message {i} {m!r}: a context message is {{role, content}}")
        return v


@dataclass(frozen=True)
class DistillSignal:
    """The distillation stage as a step component (like the KL in the reward): it reads `logp_old`, so
    the step computes the old log-probs when a variant has `distill:`."""

    spec: DistillSpec
    name: str = DISTILL_NAME
    kind: str = "distill"
    decl: Declaration = Declaration(reads=("logp_old",))

    def resolved(self) -> dict[str, float]:
        return {"beta": self.spec.beta, "gamma": self.spec.gamma}
