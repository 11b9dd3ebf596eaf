"""Training strategies (`training.strategy`): how the policy and the critic are spread over the
processes a launcher started (`torchrun`, `accelerate launch`, `zoo run --nproc N`).

- `single`: one process, the plain modules.
- `ddp`: `torch.nn.parallel.DistributedDataParallel` (every rank holds the whole model; gradients
  are all-reduced in buckets during the final micro-batch's backward, overlapping the backward).
- `fsdp`: FSDP2 (`torch.distributed.fsdp.fully_shard` on each decoder layer, then on the root;
  parameters, gradients and AdamW state sharded over ranks; the reference sharded the same way;
  bf16 parameters with fp32 gradient reduction on CUDA when autocast is bf16).

Both DDP and FSDP2 *average* gradients over ranks, while every aggregation of the engine already
divides by the optimizer step's totals over all ranks (`zoo.step.update.step_counts`): the loss is
scaled by the world size before backward (`backward`), so the gradient is the SUM over ranks and a
2-rank step equals a 1-rank step over the same rows (case C2 across ranks).

    par = wrap(policy, critic, reference_model, "ddp", device, precision)
    models = Models(policy=..., parallel=par)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import Tensor, nn

from zoo.core import dist

STRATEGIES = ("single", "ddp", "fsdp")


@dataclass
class Parallel:
    """The run's strategy and what it wrapped. `train`: {"policy": module, "critic": module} the modules
    the training forwards go through (DDP's wrapper; under fsdp the sharded module itself); `sharded`:
    the FSDP2 roots (policy, reference copy, critic) whose weights `gather_weights` all-gathers."""

    name: str = "single"
    train: dict[str, nn.Module] = field(default_factory=dict)
    sharded: list[nn.Module] = field(default_factory=list)

    @property
    def grad_scale(self) -> float:
        """What the loss is multiplied by before backward: the world size under ddp/fsdp (they average
        gradients; the engine's aggregations want the sum over ranks), 1 otherwise."""
        return float(dist.world_size()) if self.name in ("ddp", "fsdp") else 1.0


SINGLE = Parallel()


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a (peft-wrapped) transformers model or a critic: the modules whose
    class is in the model's `_no_split_modules` (transformers' list of blocks never split across
    devices, e.g. LlamaDecoderLayer). Raises ValueError when there is none."""
    names: set[str] = set()
    for m in model.modules():
        names |= set(getattr(m, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"training.strategy fsdp: found no decoder layers in {type(model).__name__} "
            f"(no module of the classes in its _no_split_modules {sorted(names)})"
        )
    return layers


def shard(model: nn.Module, device: torch.device, precision: str) -> nn.Module:
    """FSDP2 in place: `fully_shard` on each decoder layer, then on the root (arXiv:2304.11277, and
    torch's FSDP2 `fully_shard`). On CUDA with bf16 autocast: bf16 parameters for compute, fp32
    gradient reduction (`MixedPrecisionPolicy`); elsewhere the parameters keep their dtype.
    Frozen parameters (a LoRA base) are sharded like the others and get no gradient."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw = {}
    if device.type == "cuda" and precision == "bf16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def wrap(
    policy: nn.Module,
    critic: nn.Module | None,
    reference: nn.Module | None,
    name: str,
    device: torch.device,
    precision: str = "none",
) -> Parallel:
    """Apply strategy `name` to the policy and critic (and under fsdp shard the frozen `reference`
    copy too: None when there is none or it shares the policy). DDP broadcasts rank 0's weights at
    construction; FSDP2 does not, so the caller must build identical weights on every rank (seed
    LoRA and value-head initialisation the same everywhere). Returns the Parallel to put in Models."""
    if name == "single" or not dist.is_distributed() and name == "ddp":
        return Parallel(name=name, train={})  # DDP over one process: nothing to reduce
    if name == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None

        def ddp(m: nn.Module) -> nn.Module:
            # buffers (rotary frequencies) are constants: broadcasting them would make every forward a collective
            return DDP(m, device_ids=ids, broadcast_buffers=False)  # noqa (torch 2.13 warns; see its message)

        train = {"policy": ddp(policy)}
        if critic is not None:
            train["critic"] = ddp(critic)
        return Parallel(name=name, train=train)
    if name == "fsdp":
        sharded = [shard(m, device, precision) for m in (policy, reference, critic) if m is not None]
        for m in sharded:  # FSDP2 initialises from the root's first forward; `gather_weights` needs that done
            with torch.no_grad():
                m(**_tiny_input(m))
            for x in _fsdp_modules(m):  # the root keeps its weights whole after a forward: free them
                x.reshard()
        return Parallel(
            name=name, train={"policy": policy, **({"critic": critic} if critic is not None else {})}, sharded=sharded
        )
    raise ValueError(f"training.strategy {name!r}: expected one of {', '.join(STRATEGIES)}")


def runs_collectives(model: nn.Module) -> bool:
    """Whether a forward of `model` is a collective every rank must join: a DDP wrapper or an FSDP2
    module (so the number of forwards per micro-batch must not depend on the data)."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, (DistributedDataParallel, FSDPModule))


def trained(par: Parallel | None, role: str, module: nn.Module) -> nn.Module:
    """The module a training forward of `role` ("policy" | "critic") goes through: DDP's wrapper, or
    `module` itself."""
    return (par.train.get(role) if par is not None else None) or module


def backward(loss: Tensor, par: Parallel | None) -> None:
    """loss x world size (ddp/fsdp average gradients; the engine's losses are this rank's share of the
    step's sum), then backward."""
    scale = par.grad_scale if par is not None else 1.0
    (loss * scale if scale != 1.0 else loss).backward()


def micro_batches(
    par: Parallel | None, rows: list[Tensor], models, idle_inputs: Callable[[], dict] | None = None
) -> Iterator[Tensor]:
    """Yield this rank's micro-batch row indices for one optimizer step; the caller runs forward and
    backward of each in the loop body. Under ddp/fsdp every rank runs the same number of micro-batches
    (the most any rank has): a rank with fewer runs zero-loss forwards and backwards (`idle_backward`)
    after its own, so the collectives of DDP/FSDP2 match. Under ddp every micro-batch but the last
    runs inside `no_sync()` (DDP decides at forward time whether the backward reduces), so gradients
    are all-reduced once per optimizer step; FSDP2 reduce-scatters on every micro-batch (with sync
    off it would keep unsharded gradients: the memory saving gone). idle_inputs: the padding forward's
    inputs (`idle_backward`), default a 2-token text input."""
    rows = [r for r in rows if len(r)]  # an empty share (torch.arange(0).split(k) is one empty chunk)
    if par is None or par.name == "single" or not dist.is_distributed():
        yield from rows
        return
    n = int(max(dist.per_rank(float(len(rows)))))
    for i in range(n):
        with _sync(par, last=i == n - 1):
            if i < len(rows):
                yield rows[i]
            else:
                idle_backward(par, models, idle_inputs() if idle_inputs is not None else None)


@contextlib.contextmanager
def _sync(par: Parallel, last: bool) -> Iterator[None]:
    if par.name != "ddp" or last:
        yield
        return
    with contextlib.ExitStack() as stack:
        for m in par.train.values():
            stack.enter_context(m.no_sync())
        yield


def _tiny_input(model: nn.Module) -> dict[str, Tensor]:
    """A 1-row, 2-token input for forwards that only have to run (every collective of a real one)."""
    ids = torch.zeros(1, 2, dtype=torch.long, device=next(model.parameters()).device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def idle_backward(par: Parallel, models, inputs: dict | None = None) -> None:
    """A forward and backward that contribute zero to every gradient but run every collective of a
    real micro-batch (DDP's reduction, FSDP2's all-gathers and reduce-scatters): `inputs` (default a
    2-token input) through the policy (and the critic), loss = 0 x sum of the outputs. A vision-language
    policy needs a row with its images (`zoo.step.forwards.idle_inputs`), or its vision tower would get
    no gradient on this rank and the collectives would not match."""
    x = inputs if inputs is not None else _tiny_input(models.policy)
    out = par.train["policy"](**x, use_cache=False).logits
    (out.float().sum() * 0.0).backward()
    if "critic" in par.train:
        v = par.train["critic"](**x)
        (v.float().sum() * 0.0).backward()


def grad_norm(model: nn.Module) -> float:
    """Total L2 norm of the trainable parameters' gradients (already reduced over ranks by DDP/FSDP2;
    under FSDP2 they are sharded DTensors and the norm is of the full gradient). The same on every
    rank; NaN/inf when a gradient is not finite; 0 without gradients."""
    grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
    if not grads:
        return 0.0
    norm = torch.nn.utils.get_total_norm(grads)
    full = getattr(norm, "full_tensor", None)
    return float(full() if callable(full) else norm)


def clip(model: nn.Module, max_norm: float, norm: float) -> None:
    """Scale the gradients by min(1, max_norm / (norm + 1e-6)) (torch's clip rule), DTensor or not."""
    coef = min(1.0, max_norm / (norm + 1e-6))
    if coef < 1.0:
        for p in model.parameters():
            if p.requires_grad and p.grad is not None:
                p.grad.mul_(coef)


def _fsdp_modules(m: nn.Module) -> list[nn.Module]:
    from torch.distributed.fsdp import FSDPModule

    return [x for x in m.modules() if isinstance(x, FSDPModule)]


def gather_weights(par: Parallel | None) -> None:
    """fsdp: all-gather every sharded model's weights and keep them whole until `release_weights`, so
    generation, the rollout forwards and evaluation (a different number of forwards on each rank)
    run without collectives. A no-op otherwise."""
    for m in par.sharded if par is not None else ():
        m.set_reshard_after_forward(False, recurse=True)
        for x in _fsdp_modules(m):
            x.unshard()


def release_weights(par: Parallel | None) -> None:
    """fsdp: back to sharded weights (undoes `gather_weights`; the root keeps its weights whole after
    forward, as `fully_shard` sets it). A no-op otherwise."""
    for m in par.sharded if par is not None else ():
        for x in _fsdp_modules(m):
            x.reshard()
        m.set_reshard_after_forward(True, recurse=True)
        m.set_reshard_after_forward(False, recurse=False)
