"""A `distill:` variant's teacher, before any model loads: the run has a `teacher:` block that fits the
variant's `distill.teacher` (a separate model names `teacher.model`, self-distillation does not), and a
separate teacher's tokenizer gives the policy's ids (the teacher scores the student's sampled tokens:
one vocabulary). Only the two tokenizers load here, no weights."""

from __future__ import annotations

from typing import Any

from zoo.checks.registry import check
from zoo.checks.report import Report
from zoo.checks.subject import BeforeLoad
from zoo.core import registry


def teacher_errors(cfg: Any, v: Any, *, check_tokenizers: bool = True) -> list[str]:
    """What is wrong with the teacher of run `cfg` (its effective variant `v`), one line each."""
    spec, t = v.distill, cfg.teacher
    if spec is None:
        vocab = [c for c in (v.slots.loss or []) if _name(c) == "distill_vocab"]
        if vocab:
            return [
                "loss distill_vocab reads the teacher's full log-probs: the variant needs a distill: block "
                "(e.g. distill: {beta: 0.0, teacher: model}) and the run a teacher: block"
            ]
        return []  # a teacher: block with a variant that reads none: a warning (`teacher`), e.g. a study's grpo arm
    if t is None:
        return [f"distill: the variant {v.name!r} needs a teacher: block in the run file (teacher: {{model: DIR}})"]
    try:
        registry.build("teacher", spec.teacher)
    except registry.ComponentError as e:
        return [f"distill.teacher: {e}"]
    which = spec.teacher_name()
    if which != "model":
        if t.model:
            return [f"teacher.model: distill.teacher is {which!r} (the policy itself); drop teacher.model"]
        return []
    if not t.model:
        return ["teacher.model: distill.teacher is 'model', so the run file's teacher: needs model: DIR"]
    return tokenizer_errors(cfg.model, t.model) if check_tokenizers and t.model != cfg.model else []


def _name(spec: Any) -> str:
    return str(spec if isinstance(spec, str) else spec.get("name", "")) if spec else ""


def tokenizer_errors(policy: str, teacher: str) -> list[str]:
    """One line when the teacher's tokenizer differs from the policy's (or cannot be read)."""
    from transformers import AutoTokenizer

    from zoo.checks.model_path import model_dir_error
    from zoo.models.hub import hub_error, load_kwargs
    from zoo.models.sources import resolve_model
    from zoo.rewards.critic_init import tokenizer_mismatch

    why = model_dir_error(teacher, "teacher.model") or hub_error(teacher, "teacher.model") or hub_error(policy, "model")
    if why:  # one line at once, not transformers' ~30 s of retries against an unreachable Hub
        return [why]
    try:
        pt = AutoTokenizer.from_pretrained(resolve_model(policy).path, **load_kwargs(policy))
        tt = AutoTokenizer.from_pretrained(resolve_model(teacher).path, **load_kwargs(teacher))
    except (OSError, ValueError) as e:
        return [f"teacher.model: could not load the tokenizers to compare them: {str(e).splitlines()[0]}"]
    why = tokenizer_mismatch(pt, tt)
    if why:
        return [
            f"teacher.model: the teacher {teacher!r} and the policy {policy!r} do not share a tokenizer ({why}); "
            "the teacher scores the student's token ids"
        ]
    return []


@check("teacher", "before_load")
def teacher(s: BeforeLoad, rep: Report) -> None:
    """A `distill:` variant has a fitting `teacher:` block, and a separate teacher the policy's tokenizer."""
    if s.variant is not None:
        rep.errors += teacher_errors(s.cfg, s.variant)
        if s.variant.distill is None and s.cfg.teacher is not None:
            rep.warnings.append(
                f"teacher: the variant {s.variant.name!r} has no distill: block; the teacher is not loaded"
            )
