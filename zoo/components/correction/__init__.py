"""Rollout corrections (kind "correction"), the built-in ones: importing this package registers them.

- `base`: the ratio between the trainer and the sampler and the corrections on it (`tis`, `mis`, `rs`);
- `m2po`: M2PO's second-moment token mask over the step (`m2po`) and IcePop's band (`icepop`);
- `offpolicy`: DeepSeek-V3.2's off-policy sequence mask (`off_policy_sequence_mask`);
- `verl`: verl's rejection-sampling statistics and batch-normalised TIS (`rs_divergence`, `tis_normalized`);
- `entropy`: the policy gradient only on the step's high-entropy tokens (`high_entropy_tokens`).

The contract (`fn(inp: TermInputs) -> [n, T]` detached weight) is in `zoo.components`.
"""

from zoo.components.correction import (  # noqa: F401  (imports register the corrections)
    base,
    entropy,
    m2po,
    offpolicy,
    verl,
)
