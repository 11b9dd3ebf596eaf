"""Advantage estimators (kind "advantage"), every built-in one: importing this package registers them all.

- `base`: `gae`, `reinforce`, `reinforce_pp`, `group_mean`, `rloo`, and the pieces the others build
  on (token rewards, reward-to-go, sequence scores);
- `peer`: the estimators verl, TRL, SkyRL and prime-rl ship (`maxrl`, `opo`, `remax`, `otb`, `gpg`);
- `passk`: the pass@k estimators (`pass_at_k`, `pass_at_k_analytic`).

The contract (`fn(inp: AdvantageInputs) -> AdvantageResult`) is in `zoo.components`.
"""

from zoo.components.advantage import base, passk, peer  # noqa: F401  (imports register the estimators)
