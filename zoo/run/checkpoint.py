"""A run's state in its checkpoint: what `zoo.run.trainer` saves after a step and restores on a resume.

The file format, its atomic writes and its checks are `zoo.backends.train.checkpoint`; this module decides what of a
`RunState` goes in and how it comes back. Under data parallelism (`zoo.core.dist.is_distributed()`) the
weights and optimizer states go through `torch.distributed.checkpoint` instead (`zoo.backends.train.checkpoint_dcp`:
each rank writes its shards into `checkpoint/shards.stepN/`, which state.pt names); state.pt keeps the
rest. A checkpoint resumes only under the world size that wrote it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException

from zoo.backends.train import checkpoint as ckpt
from zoo.backends.train import checkpoint_dcp as dcp
from zoo.core import dist
from zoo.core.faults import WriteError
from zoo.step.types import RunState

log = logging.getLogger(__name__)


def model_parts(st: RunState, with_reference: bool = False) -> dict[str, dcp.Part]:
    """The modules and optimizers a sharded checkpoint holds: the policy (its trainable parameters: the
    LoRA adapters under peft) with its optimizer, the critic's trainable parameters with its optimizer,
    and (`with_reference`) a moved full-copy reference. They are the run's own objects, wrapped or not
    (DDP, FSDP2)."""
    parts: dict[str, dcp.Part] = {"policy": (st.models.policy, st.optimizer, False)}
    if st.models.critic is not None:
        parts["critic"] = (st.models.critic, st.critic_optimizer, False)
    if with_reference:
        parts["reference"] = (st.reference.model, None, True)
    return parts


def save_checkpoint(st: RunState, out: Path, tracker_id: str | None) -> None:
    """Write `out/checkpoint/` (zoo.backends.train.checkpoint.save) with everything a resume needs: step, totals,
    controllers, policy (LoRA adapter or full weights), optimizers, schedulers, prompt streams, every
    rank's RNG state and stream position, the world size, the tracker id, a reset reference and the
    guards. Under data parallelism the weights and optimizer states are sharded (zoo.backends.train.checkpoint_dcp)
    and state.pt names their folder; the folder the dropped state.prev.pt named is deleted. Rank 0
    writes state.pt; every rank must call it (collective)."""
    directory = out / "checkpoint"
    ranks = dist.all_gather_object(
        {"rng": ckpt.rng_state(), "stream": st.stream.state_dict(), "resample_stream": st.resample_stream.state_dict()}
    )
    sharded = dist.is_distributed()
    full_ref = sharded and st.reference is not None and st.reference.resets > 0 and not st.reference.shares_policy
    reference = _reference_state(st) if not full_ref else {"resets": st.reference.resets, "sharded": True}
    shards = dcp.save_sharded(directory, st.step, model_parts(st, full_ref)) if sharded else None
    error = _write_state(st, directory, tracker_id, ranks, reference, shards) if dist.rank() == 0 else None
    said = dist.all_gather_object(str(error) if error is not None else None)[0] if sharded else None
    if error is not None:
        raise error
    if said is not None:  # rank 0 could not write state.pt: every rank stops (none waits in a collective)
        raise WriteError(f"rank 0: {said}")


def _write_state(
    st: RunState,
    directory: Path,
    tracker_id: str | None,
    ranks: list[dict[str, Any]],
    reference: Any,
    shards: tuple[str, dict[str, Any]] | None,
) -> OSError | None:
    """Rank 0's part of `save_checkpoint`: write state.pt (and delete the shards folder no file names
    any more). Returns the OSError (WriteError) that stopped it, else None."""
    state = {
        "step": st.step,
        "controllers": [c.state_dict() for c in st.controllers],
        "totals": dict(st.totals),
        "scheduler": st.scheduler.state_dict(),
        "critic_scheduler": st.critic_scheduler.state_dict() if st.critic_scheduler else None,
        "stream": st.stream.state_dict(),
        "resample_stream": st.resample_stream.state_dict(),
        "rng": ckpt.rng_state(),
        "rng_ranks": [r["rng"] for r in ranks],
        "streams_ranks": [{k: r[k] for k in ("stream", "resample_stream")} for r in ranks],
        "world_size": dist.world_size(),
        "tracker_id": tracker_id,
        "reference": reference,
        "guards": st.guard.state_dict(),
        "teacher": st.teacher.state_dict() if st.teacher is not None else None,  # an ema teacher's weights
        # an async: run's queue (zoo.run.rollouts): the stream before the first untrained step, the pending slots
        "async": st.rollouts.state_dict(st.step) if st.rollouts is not None else None,
    }
    if shards is None:
        state.update(
            {
                "policy": ckpt.policy_state(st.models.policy),
                "optimizer": st.optimizer.state_dict(),
                "critic": ckpt.trainable_state(st.models.critic) if st.models.critic is not None else None,
                "critic_optimizer": st.critic_optimizer.state_dict() if st.critic_optimizer else None,
            }
        )
    else:
        state.update({"shards": shards[0], "shards_plain": shards[1]})
    try:
        if shards is None:
            ckpt.save(directory, state)
            return None
        dropped = ckpt.shards_dropped_by_save(directory)  # the folder of the file this save rotates out
        ckpt.save(directory, state)
    except OSError as e:
        return e
    if dropped is not None and dropped != shards[0] and (directory / dropped).is_dir():
        try:
            dcp.remove(directory / dropped)
        except OSError as e:  # the checkpoint is saved; an old folder left behind costs only disk
            log.warning("could not delete the old shards folder %s: %s", directory / dropped, e)
    return None


def _reference_state(st: RunState) -> Any:
    ref = st.reference
    if ref is None or ref.resets == 0:
        return None  # the initial policy: rebuilt from the model source
    if ref.shares_policy:
        from peft import get_peft_model_state_dict

        adapter = get_peft_model_state_dict(ref.model, adapter_name=ref.adapter)
        return {"resets": ref.resets, "adapter": {k: dcp.full(v) for k, v in adapter.items()}}
    return {"resets": ref.resets, "full": ckpt.policy_state(ref.model)}


def restore_checkpoint(st: RunState, state: dict[str, Any], directory: Path) -> None:
    """Put a loaded checkpoint (`save_checkpoint`'s dict, zoo.backends.train.checkpoint.load, from `directory`) back into
    a freshly set-up run state, so the resumed run continues as the uninterrupted one would. Collective
    under data parallelism. Raises CheckpointError for another world size (naming both) or shards that
    are missing or do not fit."""
    ckpt.check_world_size(state, directory / ckpt.FILE, dist.world_size())
    st.step, st.totals = int(state["step"]), dict(state["totals"])
    for c, cs in zip(st.controllers, state.get("controllers") or []):
        c.load_state_dict(cs)
    ref = state.get("reference")
    if "shards" in state:
        if ref is not None and ref.get("sharded"):
            from zoo.models import reset_reference

            reset_reference(st.reference, st.models.policy)  # creates the frozen copy the shards load into
            st.reference.resets = int(ref["resets"])
        folder = directory / state["shards"]
        try:
            dcp.load_sharded(folder, state["shards_plain"], model_parts(st, bool(ref and ref.get("sharded"))))
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP's error is a BaseException
            detail = " ".join(str(e).split())[:300]
            raise ckpt.CheckpointError(
                f"{folder}: cannot be loaded into this run ({type(e).__name__}: {detail}); start over with --fresh"
            ) from None
    else:
        ckpt.load_policy_state(st.models.policy, state["policy"])
        st.optimizer.load_state_dict(state["optimizer"])
        if st.models.critic is not None and state.get("critic") is not None:
            ckpt.load_trainable_state(st.models.critic, state["critic"])
            st.critic_optimizer.load_state_dict(state["critic_optimizer"])
    st.scheduler.load_state_dict(state["scheduler"])
    if st.critic_scheduler is not None and state.get("critic_scheduler") is not None:
        st.critic_scheduler.load_state_dict(state["critic_scheduler"])
    ranks = state.get("rng_ranks") or []
    mine = len(ranks) == dist.world_size()
    streams = state.get("streams_ranks") or []
    streams = streams[dist.rank()] if len(streams) == dist.world_size() else state
    st.stream.load_state_dict(streams["stream"])
    if streams.get("resample_stream") is not None:
        st.resample_stream.load_state_dict(streams["resample_stream"])
    if ref is not None and st.reference is not None and not ref.get("sharded"):
        from zoo.models import reset_reference

        reset_reference(st.reference, st.models.policy)  # creates the frozen copy / adapter
        if "adapter" in ref:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(st.reference.model, ref["adapter"], adapter_name=st.reference.adapter)
        else:
            st.reference.model.load_state_dict(ref["full"])
        st.reference.resets = int(ref["resets"])
    st.guard.load_state_dict(state.get("guards"))
    if st.teacher is not None:
        st.teacher.load_state_dict(state.get("teacher"))
    ckpt.set_rng_state(ranks[dist.rank()] if mine else state["rng"])
