"""The estimators taken from verl's code (issue 34: opo, remax, gpg, otb) against verl's own functions.

verl's `core_algos` imports its whole package (tensordict, omegaconf, ...), so these tests load only
the four functions: they parse `$ZOO_VERL_SRC/verl/trainer/ppo/core_algos.py` (a verl checkout) and
run those function definitions, decorators dropped, with torch, numpy and defaultdict. Skipped unless
ZOO_VERL_SRC is set. 5 seeds of random scores, ragged masks, groups of 2 to 4; advantages must agree
to 1e-9 on real tokens (gpg 1e-6: verl's alpha is float32). `pytest -s` prints PEER-DIFF lines.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
import torch
from peer_inputs import SEEDS, compare

from zoo.core import registry
from zoo.core.types import AdvantageInputs

SRC = os.environ.get("ZOO_VERL_SRC")
NAMES = (
    "compute_opo_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_gpg_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
)


def _load() -> dict[str, Any]:
    if not SRC:
        pytest.skip("ZOO_VERL_SRC (a verl checkout) not set (peer comparison)")
    tree = ast.parse((Path(SRC) / "verl/trainer/ppo/core_algos.py").read_text())
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in NAMES]
    for d in defs:
        d.decorator_list = []
    ns: dict[str, Any] = {"torch": torch, "np": np, "defaultdict": defaultdict, "Optional": Optional, "Any": Any}
    ns.update(AlgoConfig=object, ActorConfig=object)
    exec(compile(ast.Module(defs, type_ignores=[]), "verl_core_algos", "exec"), ns)  # noqa: S102
    missing = [n for n in NAMES if n not in ns]
    if missing:
        pytest.skip(f"this verl checkout lacks {', '.join(missing)}")
    return ns


def _case(seed: int):
    g = torch.Generator().manual_seed(seed)
    sizes = [2, 3, 4, 3]
    ids = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    n, t = len(ids), 7
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    scores = torch.randint(0, 3, (n,), generator=g).double()
    cols = torch.arange(t)[None, :]
    tlr = torch.where((cols == (lengths - 1)[:, None]) & mask, scores[:, None], torch.zeros(n, t, dtype=torch.float64))
    return ids, mask, scores, tlr, g


def _ours(name, ids, mask, scores, **extras):
    inp = AdvantageInputs(scores, mask, ids, torch.zeros(mask.shape, dtype=torch.float64), extras=extras)
    return registry.build("advantage", name)(inp).advantages


@pytest.mark.parametrize("seed", SEEDS)
def test_opo(seed):
    ns = _load()
    ids, mask, scores, tlr, _ = _case(seed)
    theirs, _ = ns["compute_opo_outcome_advantage"](tlr, mask.double(), ids.numpy())
    compare("opo", "verl compute_opo_outcome_advantage", _ours("opo", ids, mask, scores), theirs, mask, tol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_remax(seed):
    ns = _load()
    ids, mask, scores, tlr, g = _case(seed)
    b = torch.rand(len(ids), generator=g, dtype=torch.float64)
    theirs, _ = ns["compute_remax_outcome_advantage"](tlr, b, mask.double())
    ours = _ours("remax", ids, mask, scores, greedy_score=b)
    compare("remax", "verl compute_remax_outcome_advantage", ours, theirs, mask, tol=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_gpg_count_score(seed):
    ns = _load()
    ids, mask, scores, tlr, _ = _case(seed)
    theirs, _ = ns["compute_gpg_outcome_advantage"](tlr, mask.double(), ids.numpy())
    inp = AdvantageInputs(scores, mask, ids, torch.zeros(mask.shape, dtype=torch.float64))
    ours = registry.build("advantage", {"name": "gpg", "count": "score"})(inp).advantages
    # verl's alpha = bsz / torch.count_nonzero(...) is a float32 tensor: 1e-7 relative, hence 1e-6 here
    compare("gpg (count: score)", "verl compute_gpg_outcome_advantage", ours, theirs, mask, tol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_otb(seed):
    ns = _load()
    ids, mask, scores, tlr, g = _case(seed)
    old = -3.0 * torch.rand(mask.shape, generator=g, dtype=torch.float64)
    sum_pi2 = torch.rand(mask.shape, generator=g, dtype=torch.float64) * 0.5 + old.exp() ** 2
    theirs, _ = ns["compute_optimal_token_baseline_advantage"](
        tlr, mask.double(), ids.numpy(), old, sum_pi2, handle_zero_tail=False
    )
    energy = 1 - 2 * old.exp() + sum_pi2
    ours = _ours("otb", ids, mask, scores, otb_energy=energy)
    compare("otb", "verl compute_optimal_token_baseline_advantage", ours, theirs, mask, tol=1e-9)
