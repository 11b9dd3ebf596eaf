"""The optimal token baseline's step side against verl's own functions: sum_v pi_v^2 from the logits
(verl `calculate_sum_pi_squared_from_logits`, verl/utils/torch_functional.py) and the multi-turn form,
`otb` over rows packed by zoo/envs/packing.py (verl `compute_multi_turn_optimal_token_baseline_advantage`,
TIR-OTB, verl/trainer/ppo/core_algos.py, with `handle_zero_tail: false` as ours).

As tests/peers/test_peers_verl_issue34.py: only those function definitions are parsed from the verl
checkout at `$ZOO_VERL_SRC` and run with torch, numpy and defaultdict (skipped unless it is set).
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from peer_inputs import SEEDS, compare

from zoo.core import registry
from zoo.core.types import AdvantageInputs
from zoo.envs.packing import packed_advantage
from zoo.step.logprobs import _chosen_logprobs

SRC = os.environ.get("ZOO_VERL_SRC")


def _load(path: str, name: str) -> Any:
    if not SRC:
        pytest.skip("ZOO_VERL_SRC (a verl checkout) not set (peer comparison)")
    tree = ast.parse((Path(SRC) / path).read_text())
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        pytest.skip(f"this verl checkout lacks {name}")
    defs[0].decorator_list = []
    ns: dict[str, Any] = {"torch": torch, "np": np, "defaultdict": defaultdict}
    exec(compile(ast.Module(defs, type_ignores=[]), path, "exec"), ns)  # noqa: S102
    return ns[name]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sum_pi_squared(temperature):
    theirs_fn = _load("verl/utils/torch_functional.py", "calculate_sum_pi_squared_from_logits")
    g = torch.Generator().manual_seed(0)
    logits = 4.0 * torch.randn(3, 5, 50, generator=g)
    tokens = torch.randint(0, 50, (3, 5), generator=g)
    _, _, ours = _chosen_logprobs(logits, tokens, temperature, False, False, True)
    theirs = theirs_fn(logits / temperature)  # verl divides the logits by the temperature first
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_tir_otb_is_otb_over_packed_rows(seed):
    theirs_fn = _load("verl/trainer/ppo/core_algos.py", "compute_multi_turn_optimal_token_baseline_advantage")
    g = torch.Generator().manual_seed(seed)
    sizes = [2, 3, 4]
    ids = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    n, t = len(ids), 10
    mask = torch.rand(n, t, generator=g) < 0.6  # turns with environment tokens (0) between them
    mask[:, 0] = True  # every row has a trained token
    scores = torch.randint(0, 3, (n,), generator=g).double()
    last = (mask.long() * torch.arange(1, t + 1)).argmax(1)  # the last trained token
    tlr = torch.zeros(n, t, dtype=torch.float64)
    tlr[torch.arange(n), last] = scores
    old = -3.0 * torch.rand(n, t, generator=g, dtype=torch.float64)
    sum_pi2 = torch.rand(n, t, generator=g, dtype=torch.float64) * 0.5 + old.exp() ** 2
    theirs, _ = theirs_fn(tlr, mask.double(), ids.numpy(), old, sum_pi2, handle_zero_tail=False)
    energy = torch.where(mask, 1 - 2 * old.exp() + sum_pi2, torch.zeros_like(old))  # as the step writes it
    inp = AdvantageInputs(
        scores, mask, ids, torch.zeros(n, t, dtype=torch.float64), token_rewards=tlr, extras={"otb_energy": energy}
    )
    ours = packed_advantage(registry.build("advantage", "otb"), inp).advantages
    compare("otb (packed)", "verl compute_multi_turn_optimal_token_baseline_advantage", ours, theirs, mask, tol=1e-9)
