"""Clip rules (kind "clip"), every built-in one: importing this package registers them all.

- `ppo`: PPO's clipped surrogate and its family (`ppo`, `clip_higher`, `dual_clip`, `two_sided_clip`),
  `gspo`, `cispo` and `none`;
- `soft`: rules without a hard token clip (`sapo`, `gmpo`);
- `cov`: the covariance-selected rules (`clip_cov`, `kl_cov`), selecting over the optimizer step;
- `divergence`: DPPO's divergence trust region (`dppo`);
- `peer`: the policy losses verl and TRL ship (`gpg`, `dro`, `vespo`, `luspo`);
- `bypass`: any token-level rule anchored at the sampler's log-probs (`bypass`);
- `surrogate`: the pieces the rules share (sanitised inputs and log-ratio, PPO's clipped loss, a
  ClipResult), no rule.

The contract (`fn(logp, logp_old, adv, mask) -> ClipResult`, all `[N, T]`) is in `zoo.components`.
"""

from zoo.components.clip import (  # noqa: F401  (imports register the rules)
    bypass,
    cov,
    divergence,
    peer,
    ppo,
    soft,
    surrogate,
)
