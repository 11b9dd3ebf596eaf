"""Shared pieces of the peer-comparison tests (tests/peers/test_peers_verl.py, tests/peers/test_peers_trl.py).

Random float64 inputs with right-padded masks whose padded slots hold finite garbage (the peers
multiply by the mask, so NaN there would break *their* side, not ours), our clip rule + aggregation
as one scalar, and `record`, which prints each mechanism's max |difference| so
`pytest -s -k peers` lists the table of docs/reference/components.md "Against the peers".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.core import registry
from zoo.core.types import StepCounts

SEEDS = (0, 1, 2, 3, 4)
TOL = 1e-6
MAX_DIFF: dict[tuple[str, str], float] = {}


@dataclass
class Inputs:
    """logp, logp_old, adv: [N, T] float64 (garbage on padding); mask: [N, T] bool, every row at
    least one real token; seq_adv: [N], the row advantage broadcast into adv."""

    logp: Tensor
    logp_old: Tensor
    adv: Tensor
    mask: Tensor
    seq_adv: Tensor


def random_inputs(seed: int, n: int = 6, t: int = 9, spread: float = 0.3, token_adv: bool = False) -> Inputs:
    """Inputs of one seed: log-probs in (-6, 0), log-ratios N(0, spread^2), lengths in [1, t]
    (one row always full), sequence advantages N(0, 1) broadcast (token_adv: one per token)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[0] = t
    mask = torch.arange(t)[None, :] < lengths[:, None]  # [N, T]
    logp_old = -6.0 * torch.rand(n, t, generator=g, dtype=torch.float64)
    logp = (logp_old + spread * torch.randn(n, t, generator=g, dtype=torch.float64)).clamp(max=-1e-4)
    seq_adv = torch.randn(n, generator=g, dtype=torch.float64)
    adv = torch.randn(n, t, generator=g, dtype=torch.float64) if token_adv else seq_adv[:, None].expand(n, t).clone()
    garbage = 3.0 * torch.randn(n, t, generator=g, dtype=torch.float64)
    pad = ~mask
    return Inputs(
        logp=torch.where(pad, -garbage.abs(), logp),
        logp_old=torch.where(pad, -garbage.abs().flip(0), logp_old),
        adv=torch.where(pad, garbage, adv),
        mask=mask,
        seq_adv=seq_adv,
    )


def ours(clip: str | dict, aggregate: str | dict, x: Inputs, logp: Tensor, **data) -> Tensor:
    """Our scalar loss: the clip rule's per-token loss aggregated over the whole step (one micro-batch).
    logp: the leaf [N, T] the gradient is taken on; `data` passes extra data arguments (e.g. step=)."""
    res = registry.build("clip", clip)(logp, x.logp_old, x.adv, x.mask, **data)
    return registry.build("aggregate", aggregate)(res.loss, x.mask, StepCounts.of(x.mask))


def value_and_grad(fn, logp: Tensor) -> tuple[Tensor, Tensor]:
    """(scalar value, d value / d logp [N, T]) of fn(leaf) on a fresh leaf copy of logp."""
    leaf = logp.detach().clone().requires_grad_(True)
    out = fn(leaf)
    (g,) = torch.autograd.grad(out, leaf, allow_unused=True)
    return out.detach(), (torch.zeros_like(leaf) if g is None else g)


def compare(
    name: str, peer_fn: str, mine: Tensor, theirs: Tensor, mask: Tensor | None = None, tol: float = TOL
) -> float:
    """Max |mine - theirs| (over `mask` when given); records it under `name` (the largest over the
    calls with that name and peer_fn), prints `PEER-DIFF name | peer_fn | diff` and asserts it is <= tol."""
    a, b = mine.detach().double(), theirs.detach().double()
    if mask is not None:
        a, b = a[mask], b[mask]
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    key = (name, peer_fn)
    MAX_DIFF[key] = max(MAX_DIFF.get(key, 0.0), diff)
    print(f"PEER-DIFF {name} | {peer_fn} | {MAX_DIFF[key]:.3g}")
    assert diff <= tol, f"{name} vs {peer_fn}: max |diff| {diff:.3g} > {tol}"
    return diff


def require(kind: str, name: str) -> None:
    """Skip, naming what is missing, when our side has no component `name` of `kind` yet (a peer
    mechanism whose component has not landed on this branch)."""
    import pytest

    if name not in registry.available(kind):
        pytest.skip(f"{kind} {name!r} is not registered on this branch (known: {', '.join(registry.available(kind))})")
