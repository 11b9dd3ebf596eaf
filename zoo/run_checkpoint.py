"""A run's state in its checkpoint: what `zoo.trainer` saves after a step and restores on a resume.

The file format, its atomic writes and its checks are `zoo.checkpoint`; this module decides what of a
`RunState` goes in and how it comes back.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo import checkpoint as ckpt
from zoo import dist
from zoo.step.types import RunState


def save_checkpoint(st: RunState, out: Path, tracker_id: str | None) -> None:
    """Write `out/checkpoint/` (zoo.checkpoint.save) with everything a resume needs: step, totals,
    controllers, policy (LoRA adapter or full weights), optimizers, schedulers, prompt streams, every
    rank's RNG state, the tracker id, a reset reference and the guards. Rank 0 writes; every rank
    must call it (the RNG states are gathered)."""
    rng_ranks = dist.all_gather_object(ckpt.rng_state())  # every rank samples from its own RNG stream
    if dist.rank() != 0:
        return
    state = {
        "step": st.step, "controllers": [c.state_dict() for c in st.controllers], "totals": dict(st.totals),
        "policy": ckpt.policy_state(st.models.policy),
        "optimizer": st.optimizer.state_dict(), "scheduler": st.scheduler.state_dict(),
        "critic": ckpt.trainable_state(st.models.critic) if st.models.critic is not None else None,
        "critic_optimizer": st.critic_optimizer.state_dict() if st.critic_optimizer else None,
        "critic_scheduler": st.critic_scheduler.state_dict() if st.critic_scheduler else None,
        "stream": st.stream.state_dict(),
        "resample_stream": st.resample_stream.state_dict(), "rng": ckpt.rng_state(), "rng_ranks": rng_ranks, "tracker_id": tracker_id,
        "reference": _reference_state(st), "guards": st.guard.state_dict(),
    }
    ckpt.save(out / "checkpoint", state)


def _reference_state(st: RunState) -> Any:
    ref = st.reference
    if ref is None or ref.resets == 0:
        return None  # the initial policy: rebuilt from the model source
    if ref.shares_policy:
        from peft import get_peft_model_state_dict

        return {"resets": ref.resets, "adapter": get_peft_model_state_dict(ref.model, adapter_name=ref.adapter)}
    return {"resets": ref.resets, "full": ckpt.policy_state(ref.model)}


def restore_checkpoint(st: RunState, state: dict[str, Any]) -> None:
    """Put a loaded checkpoint (`save_checkpoint`'s dict, zoo.checkpoint.load) back into a freshly set-up
    run state, so the resumed run continues as the uninterrupted one would."""
    st.step, st.totals = int(state["step"]), dict(state["totals"])
    for c, cs in zip(st.controllers, state.get("controllers") or []):
        c.load_state_dict(cs)
    ckpt.load_policy_state(st.models.policy, state["policy"])
    st.optimizer.load_state_dict(state["optimizer"])
    st.scheduler.load_state_dict(state["scheduler"])
    if st.models.critic is not None and state.get("critic") is not None:
        ckpt.load_trainable_state(st.models.critic, state["critic"])
        st.critic_optimizer.load_state_dict(state["critic_optimizer"])
        st.critic_scheduler.load_state_dict(state["critic_scheduler"])
    st.stream.load_state_dict(state["stream"])
    if state.get("resample_stream") is not None:
        st.resample_stream.load_state_dict(state["resample_stream"])
    ref = state.get("reference")
    if ref is not None and st.reference is not None:
        from zoo.models import reset_reference

        reset_reference(st.reference, st.models.policy)  # creates the frozen copy / adapter
        if "adapter" in ref:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(st.reference.model, ref["adapter"], adapter_name=st.reference.adapter)
        else:
            st.reference.model.load_state_dict(ref["full"])
        st.reference.resets = int(ref["resets"])
    st.guard.load_state_dict(state.get("guards"))
    ranks = state.get("rng_ranks") or []
    ckpt.set_rng_state(ranks[dist.rank()] if len(ranks) == dist.world_size() else state["rng"])
