"""The bench's view of a step: a `zoo.step.hooks.Hooks` that records, per phase, its seconds, the
tokens it handled and its peak memory, without replacing any function of the step.

Per phase (`pop()` returns {phase: {"seconds", "tokens", "peak_mb", "real_tokens"}} per step):

    generate   tokens = completion tokens the policy sampled (to EOS): the phase's batch `policy_tokens.sum()`
    score      tokens = completion tokens scored: `loss_mask.sum()` after length shaping
    advantage  tokens = the estimator's batch `loss_mask.sum()`
    forward    tokens = positions the models ran (forward pre-hooks on policy, reference copy and
    train      critic count `input_ids`; a group's shared prompt counts once, `zoo.backends.generate.hf`)
    critic     the critic's share of train (forward, loss and backward): its seconds and positions

`decode` (not a phase): the decode steps generation ran (forwards of one new token per row on the
policy's transformers model, prefills excluded), with rows = sum of rows per step and rows_ctx = sum
of rows x attended positions (`attended`: the KV cache's length + 1), for the bound (`zoo.bench.bound`).

`work` (not a phase): {phase: {"ROLE/fwd" or "ROLE/fwdbwd": {"positions", "head_positions",
"attended", "calls"}}} of every model forward, for the step's FLOPs (`zoo.bench.bound.forward_flops`)
and the weight bytes they read (`zoo.bench.phase_bound.work_bytes`, one read per call): ROLE is
policy, reference (a copy) or critic, "fwdbwd" a forward run with gradients on (its backward follows),
positions = `input_ids.numel()`, head_positions those reaching the LM head (`logits_to_keep`), attended
the causal sum of attended positions (`forward_work`). Generation's prefills (forwards of more than one
token per row on the policy's transformers model) count under generate as "policy/fwd"; its decode
steps are `decode`'s (a prefill counts no `calls`: the decode bound counts generate's bytes).

`real_tokens` = the non-padding prompt + completion tokens of the rows each forward ran (what a
forward without sharing or padding would run). Peak memory is reset where a top-level phase starts
(`zoo.backends.train.memory.reset_peak_memory`) and read where it ends; a phase inside another (critic inside
train) is a share of it and leaves the high-water mark alone (its peak is the outer phase's).
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, Iterator

import torch

from zoo.backends.train.memory import peak_memory_mb, reset_peak_memory
from zoo.models.forward import inner_lm
from zoo.step.hooks import Hooks, Phase

#: phases whose model forwards count positions (generation's decode steps count as generated tokens)
COUNTED = ("forward", "train", "critic")


def phase_tokens(ph: Phase) -> float:
    """The tokens a phase handled, from the batch the stage put on its record (0 without one):
    the policy's sampled tokens (`policy_tokens [N]`) for generate, loss-mask tokens (`loss_mask [N, T]`) otherwise."""
    b = ph.batch
    if b is None:
        return 0.0
    return float(b.policy_tokens.sum()) if ph.name == "generate" else float(b.loss_mask.sum())


def cache_length(kwargs: dict) -> int:
    """Positions already in the KV cache a forward is passed (`cache` or `past_key_values`); 0 without one."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    return int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0


def forward_work(ids: Any, kwargs: dict) -> dict[str, float]:
    """{"positions", "head_positions", "attended"} of one forward of `ids` [n, L] (kwargs as the model
    gets them): positions n * L; head positions n * k for `logits_to_keep` k > 0, else n * L; attended
    n * (c * L + L (L + 1) / 2) with c positions in the cache (each new position attends to the cache,
    itself and the new ones before it)."""
    n, L = ids.shape
    c = cache_length(kwargs)
    k = kwargs.get("logits_to_keep")
    keep = min(int(k), L) if isinstance(k, int) and k > 0 else L
    return {"positions": float(n * L), "head_positions": float(n * keep), "attended": n * (c * L + L * (L + 1) / 2)}


def attended(kwargs: dict) -> int:
    """Positions a one-token decode forward attends to: the cache's length + 1 (`cache` or
    `past_key_values`), else
    the 2-D attention mask's width (generate may drop an all-ones mask), else the cache position + 1; 0
    when none is passed."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))  # transformers 5.x names it `cache`
    if cache is not None and hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length()) + 1
    am, pos = kwargs.get("attention_mask"), kwargs.get("cache_position")
    if am is not None and getattr(am, "dim", lambda: 0)() == 2:
        return int(am.shape[-1])
    return int(pos[-1]) + 1 if pos is not None else 0


class Probe(Hooks):
    """Per-phase seconds, tokens, positions and peak memory of the steps it observes on `device`.
    `resettable` turns False where the memory high-water mark could not be reset (the peaks are
    then the process's so far)."""

    def __init__(self, device: Any):
        self.device = device
        self.stack: list[str] = []  # the open phases, innermost last
        self.resettable = True
        self.rec: dict[str, dict[str, float]] = {}
        self.work: dict[str, dict[str, dict[str, float]]] = {}

    def add_work(self, phase: str, key: str, w: dict[str, float]) -> None:
        """Sum a forward's `forward_work` into work[phase][key]."""
        r = self.work.setdefault(phase, {}).setdefault(key, {})
        for k, v in w.items():
            r[k] = r.get(k, 0.0) + v

    def add(self, phase: str, **kv: float) -> None:
        """Add to the phase's record: peak_mb is a max, everything else a sum."""
        r = self.rec.setdefault(phase, {"seconds": 0.0, "tokens": 0.0, "peak_mb": 0.0})
        for k, v in kv.items():
            r[k] = max(r.get(k, 0.0), v) if k == "peak_mb" else r.get(k, 0.0) + v

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        ph = Phase(name)
        top = not self.stack
        if top:
            self.resettable &= reset_peak_memory(self.device)
        self.stack.append(name)
        t0 = time.perf_counter()
        try:
            yield ph
        finally:
            self.stack.pop()
        rec = {"seconds": time.perf_counter() - t0, "tokens": phase_tokens(ph)}
        if top:
            rec["peak_mb"] = peak_memory_mb(self.device)
        self.add(name, **rec)

    @contextlib.contextmanager
    def forward(self, role: str, mb: Any) -> Iterator[None]:
        if self.stack:
            self.add(self.stack[-1], real_tokens=float(mb.prompt_mask.sum() + mb.loss_mask.sum()))
        yield

    def position_hook(self, module: Any, args: tuple, kwargs: dict, role: str = "policy") -> None:
        """Forward pre-hook (with kwargs) on policy / reference copy / critic: the positions it runs,
        and its work under `role`."""
        if not self.stack or self.stack[-1] not in COUNTED:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            self.add(self.stack[-1], tokens=float(ids.numel()))
            if ids.dim() == 2:
                grad = "fwdbwd" if torch.is_grad_enabled() else "fwd"
                self.add_work(self.stack[-1], f"{role}/{grad}", {**forward_work(ids, kwargs), "calls": 1.0})

    def decode_hook(self, module: Any, args: tuple, kwargs: dict) -> None:
        """Forward pre-hook (with kwargs) on the policy's transformers model: one decode step per forward
        of one token per row during generate."""
        if not self.stack or self.stack[-1] != "generate":
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or ids.dim() != 2:
            return  # embeddings passed in
        if ids.shape[1] != 1:  # a prefill: not a decode step, its work counts
            self.add_work("generate", "policy/fwd", forward_work(ids, kwargs))
            return
        self.add("decode", steps=1.0, rows=float(ids.shape[0]), rows_ctx=float(ids.shape[0] * attended(kwargs)))

    def pop(self) -> dict[str, dict[str, float]]:
        """The records since the last `pop` (one step's; `work` among them where a forward ran), and start afresh."""
        rec, self.rec = self.rec, {}
        if self.work:
            rec["work"], self.work = self.work, {}
        return rec


@contextlib.contextmanager
def attach(st: Any) -> Iterator[Probe]:
    """A `Probe` for the run `st` (a `zoo.step.types.RunState`), with its position pre-hooks on the
    policy, the reference copy (when it is one) and the critic; the pre-hooks are removed on exit.
    Pass it to `zoo.step.pipeline.step(st, hooks=probe)`."""
    probe = Probe(st.device)
    # the critic's backbone, not the ValueModel: its shared-prompt values call the backbone directly (zoo.step.forwards)
    critic = getattr(st.models.critic, "backbone", st.models.critic)
    modules = [("policy", st.models.policy), ("critic", critic)]
    if st.reference is not None and not st.reference.shares_policy:
        modules.append(("reference", st.reference.model))
    handles = [
        m.register_forward_pre_hook(functools.partial(probe.position_hook, role=role), with_kwargs=True)
        for role, m in modules
        if m is not None
    ]
    handles.append(inner_lm(st.models.policy).register_forward_pre_hook(probe.decode_hook, with_kwargs=True))
    try:
        yield probe
    finally:
        for h in handles:
            h.remove()
