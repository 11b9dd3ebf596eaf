"""Built-in components, one place per kind: a module (`aggregate`, `normalize`, `objective`, `kl`,
`length`, `filter`, `critic`, `controllers`) or, for the kinds with many built-ins, a package of modules
(`advantage/`, `clip/`, `correction/`, `loss/`). `stats` holds the statistics they share. Importing this
package registers them all: it is the one place that imports the built-in components (zoo/__init__.py
names it to the core's registry, which imports it on first use).

The data contract of each kind (positional arguments; hyperparameters are keyword-only):
N completions, T completion tokens (right-padded), K reward objectives. Masks are bool/0-1 `[N, T]`,
True on real tokens (up to and including the first EOS).

| kind | call | returns |
|---|---|---|
| objective_norm | `fn(objectives [N, K], group_ids [N])` | `[N, K]` normalised objectives (NaN rows stay NaN) |
| advantage | `fn(inp: AdvantageInputs)` | `AdvantageResult(advantages [N, T], returns [N, T] or None)` |
| normalizer | `fn(adv [N, T], mask [N, T], group_ids [N])` | `[N, T]` |
| clip | `fn(logp, logp_old, adv, mask)` all `[N, T]` (+ keyword `step: StepView` for a rule registered with `selects=True`, and keyword `logp_rollout` etc. for each rollout field it declares in `reads=`) | `ClipResult(loss [N, T], clip_low [N, T] bool, clip_high [N, T] bool, ratio [N, T])` |
| aggregate | `fn(loss [N, T], mask [N, T], counts: StepCounts)` | scalar; summing it over the micro-batches of one optimizer step gives the step's value |
| kl_estimator | `fn(logp [N, T], ref_logp [N, T])` | `[N, T]` per-token estimate |
| length | `fn(lengths [N], truncated [N] bool, max_new_tokens: int, rows: LengthRows)` | `LengthResult(column [N] or None, keep [N] bool or None)` |
| filter | `fn(metrics: Mapping[str, Tensor [N]], group_ids [N])` | keep `[N]` bool (whole groups kept or dropped) |
| critic | `fn(values, old_values, returns, mask, counts: StepCounts)` | scalar value loss (already times its coefficient) |
| loss | `fn(inp: TermInputs)` | `TermResult(loss [n, T], token_stats)`: an extra per-token loss |
| correction | `fn(inp: TermInputs)` | detached weight `[n, T]` multiplying the clip rule's per-token loss |
| controller | `fn()` (hyperparameters only) | a controller: `coefficients()`, `update(metrics, tokens, rows)`, `state_dict()` |
| reward | `fn(completions: list[str], rows: list[dict])` | list of float or None, length N |

The table of slots (which kind fills which slot, single or list) is `zoo/core/kinds.py`.
"""

from zoo.components import (  # noqa: F401  (imports register the components)
    advantage,
    aggregate,
    clip,
    controllers,
    correction,
    critic,
    filter,
    kl,
    length,
    loss,
    normalize,
    objective,
)
