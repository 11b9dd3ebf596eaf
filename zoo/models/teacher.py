"""The teacher of a distillation run: a model that is opened once per run, scored with in no-grad
forwards, and closed when the run ends (the trainer's `finally`, like a reward model's session).

    teacher = open_teacher("model", policy, cfg.teacher, dev)   # or frozen, current, {name: ema, alpha: 0.01}
    with teacher.forward() as m:
        logp, _ = token_logprobs(m, ids, att, T, temperature=...)
    teacher.after_update(policy)   # ema: teacher <- (1 - alpha) teacher + alpha policy
    teacher.close()

Which teacher (the variant's `distill.teacher`, zoo/config/distill.py; registry kind `teacher`):
- `model`: a separate frozen model loaded from `teacher.model` (on-policy distillation; its tokenizer is
  checked against the policy's before any model loads, zoo/checks/inputs.py);
- `frozen`: the initial policy, a frozen copy; with LoRA the policy itself with its adapters disabled
  (zoo.models.reference: no second copy of the weights);
- `current`: the policy as it is now (no gradient);
- `ema`: a frozen copy updated after each step, theta_T <- (1 - alpha) theta_T + alpha theta (SDFT,
  Shenfeld et al. arXiv 2601.19897, alpha 0.01); with LoRA only the trainable (adapter) weights move.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import nn

from zoo.core import registry
from zoo.core.registry import register
from zoo.models.reference import Reference, make_reference, reference_forward


@dataclass
class Teacher:
    """An open teacher. which: model | frozen | current | ema; model: the module its forwards run
    (for `current` the policy); ref: the frozen Reference wrapper (model, frozen); alpha: the EMA rate."""

    which: str
    model: nn.Module | None
    ref: Reference | None = None
    alpha: float = 0.01
    tokenizer: Any = None
    moving: tuple[str, ...] = ()  # ema: the parameters that move (the policy's trainable ones)

    @contextlib.contextmanager
    def forward(self) -> Iterator[nn.Module]:
        """The teacher's module in eval mode under no_grad (train mode restored on exit)."""
        if self.model is None:
            raise RuntimeError("the teacher is closed")
        if self.ref is not None:
            with reference_forward(self.ref) as m:
                yield m
            return
        was = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield self.model
        finally:
            self.model.train(was)

    @torch.no_grad()
    def after_update(self, policy: nn.Module) -> None:
        """After the step's optimizer updates: an `ema` teacher moves towards the policy (trainable
        weights only: with LoRA the adapters; the frozen base weights are equal in both copies)."""
        if self.which != "ema" or self.model is None:
            return
        mine = dict(self.model.named_parameters())
        for name, p in policy.named_parameters():
            if p.requires_grad and name in mine:
                full = p.full_tensor() if hasattr(p, "full_tensor") else p  # an FSDP2 shard: the whole weight
                mine[name].lerp_(full.detach().to(mine[name].device, mine[name].dtype), self.alpha)

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        """What a checkpoint keeps: an `ema` teacher's moving weights (with LoRA the adapters); the other
        teachers are rebuilt (the model from its source, frozen from the initial policy, current is the policy)."""
        if self.which != "ema" or self.model is None:
            return None
        params = dict(self.model.named_parameters())
        return {k: params[k].detach().cpu().clone() for k in self.moving}

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        if state is not None and self.which == "ema" and self.model is not None:
            params = dict(self.model.named_parameters())
            with torch.no_grad():
                for k, v in state.items():
                    params[k].copy_(v)

    def close(self) -> None:
        """Drop the teacher's weights (a `current` teacher is the policy: nothing to free)."""
        self.model, self.ref = None, None


def open_teacher(spec: Any, policy: nn.Module, cfg: Any, device: torch.device | str = "cpu") -> Teacher:
    """The run's teacher: `spec` the variant's distill.teacher (a name or {name, params} of kind
    `teacher`), cfg the run file's `teacher:` block (zoo.config.distill.TeacherConfig)."""
    return registry.build("teacher", spec)(policy, cfg, device)


@register("teacher", "model")
def model_teacher(policy: nn.Module, cfg: Any, device: Any, /) -> Teacher:
    """A separate frozen model, `teacher.model` (on-policy distillation), in `teacher.dtype`."""
    from zoo.models.policy import load_policy

    if not getattr(cfg, "model", None):
        raise ValueError("distill.teacher: model needs the run's teacher.model")
    m, tok = load_policy(cfg.model, dtype=cfg.dtype, device=device)
    m.eval().requires_grad_(False)
    return Teacher("model", m, tokenizer=tok)


@register("teacher", "frozen")
def frozen_teacher(policy: nn.Module, cfg: Any, device: Any, /) -> Teacher:
    """The initial policy: a frozen copy, or with LoRA the policy with its adapters disabled."""
    ref = make_reference(policy)
    return Teacher("frozen", ref.model, ref=ref)


@register("teacher", "current")
def current_teacher(policy: nn.Module, cfg: Any, device: Any, /) -> Teacher:
    """The policy as it is now, in no-grad forwards (self-distillation with privileged context)."""
    return Teacher("current", policy)


def _check_alpha(params: Any, context: Any) -> None:
    if not 0 < float(params.get("alpha", 0.01)) <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {params.get('alpha')}")


@register("teacher", "ema", check=_check_alpha)
def ema_teacher(policy: nn.Module, cfg: Any, device: Any, /, *, alpha: float = 0.01) -> Teacher:
    """A frozen copy that moves towards the policy after each step, rate alpha (SDFT arXiv 2601.19897: 0.01)."""
    moving = tuple(n for n, p in policy.named_parameters() if p.requires_grad)
    m = copy.deepcopy(policy).eval()
    m.requires_grad_(False)
    return Teacher("ema", m, alpha=alpha, moving=moving)
