"""Loss terms (kind "loss"), every built-in one: importing this package registers them all.

- `base`: the contract of a term and the terms every variant may use: the KL to the reference in the
  loss (`kl`, made from the `kl:` slot) and PPO's entropy bonus (`entropy_bonus`);
- `positive_nll`: VAPO's NLL over the correct completions (`nll_positive`);
- `distill_divergence`: the full-vocabulary divergences of distillation and their term (`distill_vocab`).

The contract (`fn(inp: TermInputs) -> TermResult(loss [n, T], token_stats)`) is in `zoo.components`.
"""

from zoo.components.loss import base, distill_divergence, positive_nll  # noqa: F401  (imports register the terms)
