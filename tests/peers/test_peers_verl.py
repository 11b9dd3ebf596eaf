"""Our components against verl's own code (verl.trainer.ppo.core_algos and rollout_corr_helper).

Runs only where verl is importable (e.g. `PYTHONPATH=/work/peers`, verl 0.9.1 installed --no-deps);
skipped otherwise (CI has no verl). Every test runs several seeds of random float64 inputs with
right-padded masks (finite garbage in the padding), maps the conventions explicitly (aggregation,
which eps means what, sign, detach) and asserts values and gradients to 1e-6. `pytest -s` prints
`PEER-DIFF mechanism | verl function | max |diff|` (the table of docs/reference/components.md "Against the peers").

Conventions mapped here (ours -> verl):
- loss sign: both return the loss to minimise (minus the surrogate); verl's `pg_loss` is our
  aggregated clip-rule loss.
- verl `vanilla` is always dual-clip (clip_ratio_c default 3): our `ppo` / `clip_higher` are
  `vanilla` with clip_ratio_c = 1e12; our `dual_clip(c)` is `vanilla` with clip_ratio_c = c.
- eps: our eps_low / eps_high are verl's clip_ratio_low / clip_ratio_high (1 - eps, 1 + eps), also
  for cispo; our cispo `eps_low: null` (no lower cap) is clip_ratio_low = 1e12.
- verl's whitening (masked_whiten: (x - mean) * rsqrt(var + 1e-8)) is our `batch_std` normalizer
  with shift_mean and level token; its eps differs (ours: std + eps), so it runs with eps 1e-12.
- seq-mean modes: verl divides by the non-empty rows of the micro-batch (or global_batch_size); we
  divide by every row of the step (StepCounts.sequences): equal without empty rows, and a test pins
  the ratio with one.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from peer_inputs import SEEDS, compare, ours, random_inputs, require, value_and_grad

from zoo.core import registry
from zoo.core.types import AdvantageInputs, StepCounts, StepView

core = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl not installed (peer comparison)")
from verl.workers.config.actor import ActorConfig, PolicyLossConfig  # noqa: E402

HUGE = 1e12  # a bound that never acts


def actor(**kw) -> ActorConfig:
    """A verl ActorConfig with the fields the policy losses read (the rest are verl's defaults)."""
    policy = kw.pop("policy_loss", {})
    return ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, policy_loss=PolicyLossConfig(**policy), **kw
    )


def verl_loss(name: str, x, logp, mode: str, config: ActorConfig):
    fn = core.get_policy_loss_fn(name)
    loss, _ = fn(
        old_log_prob=x.logp_old,
        log_prob=logp,
        advantages=x.adv,
        response_mask=x.mask.double(),
        loss_agg_mode=mode,
        config=config,
    )
    return loss


def check_policy(name: str, peer: str, clip, agg: str, mode: str, config: ActorConfig, x, **data) -> None:
    """Value and gradient (w.r.t. logp) of our clip rule + aggregation against verl's policy loss."""
    v1, g1 = value_and_grad(lambda lp: ours(clip, agg, x, lp, **data), x.logp)
    v2, g2 = value_and_grad(lambda lp: verl_loss(peer, x, lp, mode, config), x.logp)
    compare(name, f"verl {peer} ({mode})", v1, v2)
    compare(name, f"verl {peer} ({mode})", g1, g2)


AGG = [
    ("token_mean", "token-mean"),
    ("seq_mean_token_mean", "seq-mean-token-mean"),
    ("seq_mean_token_sum", "seq-mean-token-sum"),
    ("seq_mean_token_sum_norm", "seq-mean-token-sum-norm"),
]


# ---------------------------------------------------------------- clip rules
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg,mode", AGG)
def test_ppo_is_vanilla_without_dual_clip(seed, agg, mode):
    x = random_inputs(seed, spread=0.4)
    check_policy(
        "ppo",
        "vanilla",
        {"name": "ppo", "eps": 0.2},
        agg,
        mode,
        actor(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=HUGE),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_clip_higher_is_vanilla_low_high(seed):
    x = random_inputs(seed, spread=0.4)
    r = (x.logp - x.logp_old).exp()[x.mask]
    assert ((r > 1.28) | (r < 0.8)).any()  # some tokens are clipped, so eps_low/eps_high matter
    check_policy(
        "clip_higher",
        "vanilla",
        {"name": "clip_higher", "eps_low": 0.2, "eps_high": 0.28},
        "token_mean",
        "token-mean",
        actor(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=HUGE),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_dual_clip_is_vanilla_with_clip_ratio_c(seed):
    x = random_inputs(seed, spread=1.0, token_adv=True)
    neg = (x.adv < 0) & x.mask
    i, j = neg.nonzero()[0].tolist()
    x.logp[i, j] = x.logp_old[i, j] + 2.0  # one A < 0 token at r = e^2 ~ 7.4, beyond c = 3
    r = (x.logp - x.logp_old).exp()
    assert (neg & (r > 3.0)).any()  # the dual-clip region is reached
    check_policy(
        "dual_clip",
        "vanilla",
        {"name": "dual_clip", "eps_low": 0.2, "eps_high": 0.28, "c": 3.0},
        "token_mean",
        "token-mean",
        actor(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eps_low", [0.2, None])
def test_cispo_is_verl_cispo(seed, eps_low):
    # verl and zoo cap the IS weight at 1 + eps_high (TRL caps r itself: see test_peers_trl.py)
    x = random_inputs(seed, spread=0.5)
    low = HUGE if eps_low is None else eps_low
    check_policy(
        "cispo",
        "cispo",
        {"name": "cispo", "eps_low": eps_low, "eps_high": 0.28},
        "token_mean",
        "token-mean",
        actor(clip_ratio_low=low, clip_ratio_high=0.28),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_gspo_is_verl_gspo(seed):
    # log-ratios of ~1e-3 so some rows' sequence ratio is inside [1 - 3e-4, 1 + 4e-4], some outside
    x = random_inputs(seed, spread=1e-3)
    check_policy(
        "gspo",
        "gspo",
        {"name": "gspo"},
        "seq_mean_token_mean",
        "seq-mean-token-mean",
        actor(clip_ratio_low=3e-4, clip_ratio_high=4e-4),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_sapo_is_verl_sapo(seed):
    # verl's sapo aggregates seq-mean-token-mean whatever loss_agg_mode says: we pass token-mean to show it
    require("clip", "sapo")
    x = random_inputs(seed, spread=0.5)
    check_policy(
        "sapo",
        "sapo",
        {"name": "sapo", "tau_pos": 1.0, "tau_neg": 1.05},
        "seq_mean_token_mean",
        "token-mean",
        actor(tau_pos=1.0, tau_neg=1.05),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_gmpo_is_verl_geo_mean(seed):
    # verl geo_mean: clip_ratio_low/high are the log-space bounds; its loss is a plain mean over rows
    require("clip", "gmpo")
    x = random_inputs(seed, spread=0.5)
    check_policy(
        "gmpo",
        "geo_mean",
        {"name": "gmpo", "eps_low": 0.4, "eps_high": 0.4},
        "seq_mean_token_mean",
        "token-mean",
        actor(clip_ratio_low=0.4, clip_ratio_high=0.4),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_clip_cov_is_verl_clip_cov_when_every_candidate_is_picked(seed):
    # verl draws its tokens with torch.randperm, ours with a seeded priority: the picks can only agree
    # when both take every candidate, i.e. ratio 1 (k = n_tokens >= candidates). The candidate set
    # (not PPO-clipped, cov in (lb, ub)) is then compared exactly; bounds 0.05..0.5 leave some in, some out.
    require("clip", "clip_cov")
    x = random_inputs(seed, spread=0.4, token_adv=True)
    spec = {"name": "clip_cov", "eps_low": 0.2, "eps_high": 0.2, "ratio": 1.0, "cov_lb": 0.05, "cov_ub": 0.5}
    cfg = actor(
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        policy_loss={"loss_mode": "clip_cov", "clip_cov_ratio": 1.0, "clip_cov_lb": 0.05, "clip_cov_ub": 0.5},
    )
    from zoo.components.clip.cov import token_covariance

    cov = token_covariance(x.logp, x.adv, x.mask)[x.mask]
    inside = (cov > 0.05) & (cov < 0.5)
    assert inside.any() and not inside.all()
    check_policy("clip_cov", "clip_cov", spec, "token_mean", "token-mean", cfg, x)


@pytest.mark.parametrize("seed", SEEDS)
def test_kl_cov_is_verl_kl_cov(seed):
    # top-k by covariance is deterministic (continuous inputs: no ties); ratio 0.1 picks a few tokens;
    # verl's ppo_kl_coef is our beta. One call = one micro-batch: our own view is verl's micro-batch.
    require("clip", "kl_cov")
    x = random_inputs(seed, spread=0.4, token_adv=True)
    cfg = actor(policy_loss={"loss_mode": "kl_cov", "kl_cov_ratio": 0.1, "ppo_kl_coef": 1.0})
    check_policy("kl_cov", "kl_cov", {"name": "kl_cov", "ratio": 0.1, "beta": 1.0}, "token_mean", "token-mean", cfg, x)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rule", ["kl_cov", "clip_cov"])
def test_whole_step_selection_is_verl_on_the_whole_step_in_one_call(seed, rule):
    # our default scope (step): micro-batches of 2 rows, each given the StepView of all rows, select
    # what verl selects when called once on the whole step; the micro-batch shares sum to verl's loss
    require("clip", rule)
    x = random_inputs(seed, spread=0.4, token_adv=True)
    if rule == "kl_cov":
        spec, cfg = (
            {"name": "kl_cov", "ratio": 0.1, "beta": 1.0},
            {"loss_mode": "kl_cov", "kl_cov_ratio": 0.1, "ppo_kl_coef": 1.0},
        )
    else:
        spec = {"name": "clip_cov", "eps_low": 0.2, "eps_high": 0.2, "ratio": 1.0, "cov_lb": 0.05, "cov_ub": 0.5}
        cfg = {"loss_mode": "clip_cov", "clip_cov_ratio": 1.0, "clip_cov_lb": 0.05, "clip_cov_ub": 0.5}
    clip, agg = registry.build("clip", spec), registry.build("aggregate", "token_mean")
    counts = StepCounts.of(x.mask)

    def ours_in_micro_batches(lp):
        fields = {
            "mask": x.mask,
            "advantages": torch.where(x.mask, x.adv, 0.0),
            "logp_old": torch.where(x.mask, x.logp_old, 0.0),
            "logp": torch.where(x.mask, lp.detach(), 0.0),
        }
        total = 0.0
        for i in range(0, x.mask.shape[0], 2):
            rows = torch.arange(i, i + 2)
            view = StepView(fields, rows)
            res = clip(lp[rows], x.logp_old[rows], x.adv[rows], x.mask[rows], step=view)
            total = total + agg(res.loss, x.mask[rows], counts)
        return total

    v1, g1 = value_and_grad(ours_in_micro_batches, x.logp)
    v2, g2 = value_and_grad(
        lambda lp: verl_loss(
            rule, x, lp, "token-mean", actor(clip_ratio_low=0.2, clip_ratio_high=0.2, policy_loss=cfg)
        ),
        x.logp,
    )
    compare(f"{rule} (scope step, micro-batches of 2)", f"verl {rule} (whole step in one call)", v1, v2)
    compare(f"{rule} (scope step, micro-batches of 2)", f"verl {rule} (whole step in one call)", g1, g2)


# ---------------------------------------------------------------- aggregation
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg,mode", AGG)
def test_aggregations_are_agg_loss_also_in_micro_batch_shares(seed, agg, mode):
    x = random_inputs(seed)
    loss = torch.randn(x.mask.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    counts = StepCounts.of(x.mask)
    fn = registry.build("aggregate", agg)
    compare(
        f"aggregate {agg}",
        f"verl agg_loss {mode}",
        fn(loss, x.mask, counts),
        core.agg_loss(loss, x.mask.double(), mode),
    )
    # micro-batches of 2 rows: verl with the step's totals in global_batch_info; the shares sum to the step
    info = {
        "dp_size": 1,
        "batch_num_tokens": int(x.mask.sum()),
        "global_batch_size": x.mask.shape[0],
        "loss_scale_factor": x.mask.shape[1],
    }
    ours_sum = sum(fn(loss[i : i + 2], x.mask[i : i + 2], counts) for i in range(0, len(loss), 2))
    verl_sum = sum(
        core.agg_loss(loss[i : i + 2], x.mask[i : i + 2].double(), mode, **info) for i in range(0, len(loss), 2)
    )
    compare(f"aggregate {agg}", f"verl agg_loss {mode}", ours_sum, verl_sum)


@pytest.mark.parametrize("agg,mode", AGG[1:])
def test_seq_mean_counts_empty_rows_unlike_verl(agg, mode):
    # our convention: a row without real tokens still counts as a sequence (the step's N); verl's default
    # divides by the non-empty rows. So with 1 empty row of 6: ours = verl * 5 / 6.
    x = random_inputs(7)
    mask = x.mask.clone()
    mask[3] = False
    loss = torch.randn(mask.shape, dtype=torch.float64)
    got = registry.build("aggregate", agg)(loss, mask, StepCounts.of(mask))
    compare(
        f"aggregate {agg} (empty row)",
        f"verl agg_loss {mode} x 5/6",
        got,
        core.agg_loss(loss, mask.double(), mode) * 5 / 6,
    )


# ---------------------------------------------------------------- KL estimators
@pytest.mark.parametrize(
    "ours_name,verl_names", [("k1", ("k1", "kl")), ("k2", ("k2", "mse")), ("k3", ("k3", "low_var_kl"))]
)
def test_kl_estimators_are_kl_penalty(ours_name, verl_names):
    g = torch.Generator().manual_seed(0)
    logp = -6 * torch.rand(50, 40, generator=g, dtype=torch.float64)
    ref = logp + 2.0 * torch.randn(50, 40, generator=g, dtype=torch.float64)
    ref[0, :4] = torch.tensor([-40.0, 40.0, -15.0, 25.0], dtype=torch.float64)  # the clamps (+-20, 10) act
    est = registry.build("kl_estimator", ours_name)
    for name in verl_names:
        v1, g1 = value_and_grad(lambda lp: est(lp, ref).sum(), logp)
        v2, g2 = value_and_grad(lambda lp: core.kl_penalty(lp, ref, name).sum(), logp)  # noqa: B023 (called within this iteration)
        compare(f"kl {ours_name}", f"verl kl_penalty {name}", est(logp, ref), core.kl_penalty(logp, ref, name))
        compare(f"kl {ours_name}", f"verl kl_penalty {name}", g1, g2)


# ---------------------------------------------------------------- advantages
def outcome_batch(seed: int, n_groups: int = 4, g_size: int = 4, t: int = 8, binary: bool = False):
    """Shuffled groups (no singleton), one group with equal scores, KL in the reward on real tokens
    (garbage on padding for us, 0 for verl). Returns (AdvantageInputs, verl token_level_rewards, index)."""
    gen = torch.Generator().manual_seed(seed)
    n = n_groups * g_size
    gids = torch.arange(n_groups).repeat_interleave(g_size)[torch.randperm(n, generator=gen)]
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    scores = (torch.randint(0, 2, (n,), generator=gen) if binary else torch.randn(n, generator=gen)).double()
    scores[gids == 0] = 0.5  # a group whose members all score alike
    kl = 0.05 * torch.randn(n, t, generator=gen, dtype=torch.float64)
    values = torch.randn(n, t, generator=gen, dtype=torch.float64)
    garbage = 7.0 * torch.randn(n, t, generator=gen, dtype=torch.float64)
    inp = AdvantageInputs(
        scores=scores,
        mask=mask,
        group_ids=gids,
        kl_reward=torch.where(mask, kl, garbage),
        values=torch.where(mask, values, garbage),
    )
    rewards = torch.where(mask, kl, torch.zeros_like(kl))
    rewards[torch.arange(n), lengths - 1] += scores  # verl: the score on the last real token
    return inp, rewards, gids.numpy()


def advantages(name: str, inp: AdvantageInputs, normalizer: str | dict = "none", **hp):
    res = registry.build("advantage", {"name": name, **hp})(inp)
    adv = registry.build("normalizer", normalizer)(res.advantages, inp.mask, inp.group_ids)
    return adv, res.returns


WHITEN = {"name": "batch_std", "shift_mean": True, "level": "token", "eps": 1e-12}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("std", [True, False])
def test_group_mean_group_std_is_grpo_outcome(seed, std):
    inp, rewards, index = outcome_batch(seed)
    mine, _ = advantages("group_mean", inp, "group_std" if std else "none")
    theirs, _ = core.compute_grpo_outcome_advantage(
        rewards, inp.mask.double(), index, epsilon=1e-6, norm_adv_by_std_in_grpo=std
    )
    compare("group_mean + group_std" if std else "group_mean", "verl grpo", mine, theirs, inp.mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo_is_verl_rloo(seed):
    inp, rewards, index = outcome_batch(seed)
    theirs, _ = core.compute_rloo_outcome_advantage(rewards, inp.mask.double(), index)
    compare("rloo", "verl rloo", advantages("rloo", inp)[0], theirs, inp.mask)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_batch_std_is_verl_reinforce_plus_plus(seed, gamma):
    inp, rewards, _ = outcome_batch(seed)
    adv, _ = advantages("reinforce_pp", inp, WHITEN, gamma=gamma)
    raw, _ = advantages("reinforce_pp", inp, gamma=gamma)
    theirs, returns = core.compute_reinforce_plus_plus_outcome_advantage(
        rewards, inp.mask.double(), config=SimpleNamespace(gamma=gamma)
    )
    compare("reinforce_pp + batch_std", "verl reinforce_plus_plus", adv, theirs, inp.mask)
    compare("reinforce_pp (returns)", "verl reinforce_plus_plus returns", raw, returns, inp.mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_group_mean_batch_std_is_verl_reinforce_plus_plus_baseline(seed):
    inp, rewards, index = outcome_batch(seed)
    theirs, _ = core.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, inp.mask.double(), index)
    compare(
        "group_mean + batch_std",
        "verl reinforce_plus_plus_baseline",
        advantages("group_mean", inp, WHITEN)[0],
        theirs,
        inp.mask,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.99, 0.9)])
def test_gae_is_verl_gae(seed, gamma, lam):
    # verl whitens the advantages inside compute_gae_advantage_return: our batch_std normalizer
    inp, rewards, _ = outcome_batch(seed)
    adv, returns = advantages("gae", inp, WHITEN, gamma=gamma, lam=lam)
    values = torch.where(inp.mask, inp.values, torch.zeros_like(inp.values))
    theirs, their_returns = core.compute_gae_advantage_return(rewards, values, inp.mask.double(), gamma, lam)
    compare("gae + batch_std", "verl gae", adv, theirs, inp.mask)
    compare("gae (returns)", "verl gae returns", returns, their_returns, inp.mask)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("std", [True, False])
@pytest.mark.parametrize("binary", [False, True])
def test_pass_at_k_is_verl_grpo_passk(seed, std, binary):
    # binary scores: ties at the maximum, where verl's topk gives the tied winner r_max - r_second = 0
    require("advantage", "pass_at_k")
    inp, rewards, index = outcome_batch(seed, binary=binary)
    theirs, _ = core.compute_grpo_passk_outcome_advantage(
        rewards, inp.mask.double(), index, epsilon=1e-6, config={"norm_adv_by_std_in_grpo": std}
    )
    mine, _ = advantages("pass_at_k", inp, scale_by_std=std, eps=1e-6)
    compare("pass_at_k", "verl grpo_passk", mine, theirs, inp.mask)


# ---------------------------------------------------------------- rollout corrections
F32_TOL = 1e-5  # our corrections compute the weight in float32 (a detached weight <= 3: round-off ~1e-6)


def correction_inputs(seed: int, level: str):
    """24 rows whose sampler log-probs differ from logp_old by N(0, sigma^2) per token (sigma 0.6 at
    token level, 0.3 for the row sums / means); row 0 (9 tokens) is shifted by 0.2 nats per token
    (sequence rho e^1.8 ~ 6, geometric e^0.2 ~ 1.22: outside every bound below) and row 1 agrees
    exactly (rho 1: inside every bound), so each bound acts on some rows and not on all."""
    sigma = 0.6 if level == "token" else 0.3
    x = random_inputs(seed, n=24)
    g = torch.Generator().manual_seed(100 + seed)
    rollout = x.logp_old + sigma * torch.randn(x.mask.shape, generator=g, dtype=torch.float64)
    rollout[0] = x.logp_old[0] - 0.2
    rollout[1] = x.logp_old[1]
    return x, rollout


def our_weight(name: str, spec: dict, x, rollout):
    require("correction", name)
    from zoo.core.types import TermInputs

    inp = TermInputs(
        logp=x.logp,
        logp_old=x.logp_old,
        advantages=x.adv,
        mask=x.mask,
        counts=StepCounts.of(x.mask),
        logp_rollout=rollout,
    )
    return registry.build("correction", {"name": name, **spec})(inp)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_tis_is_verl_rollout_is_truncate(seed, level):
    x, rollout = correction_inputs(seed, level)
    mine = our_weight("tis", {"C": 2.0, "level": level}, x, rollout)
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    theirs, _ = compute_rollout_correction_weights(
        x.logp_old - rollout, x.mask.double(), rollout_is=level, rollout_is_threshold=2.0
    )
    assert (theirs[x.mask] == 2.0).any() and (theirs[x.mask] < 2.0).any()  # the cap acts on some tokens only
    compare(f"tis ({level})", f"verl rollout_is={level}, threshold 2.0", mine, theirs, x.mask, tol=F32_TOL)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_mis_is_verl_rollout_is_icepop(seed, level):
    x, rollout = correction_inputs(seed, level)
    mine = our_weight("mis", {"c_low": 0.5, "c_high": 2.0, "level": level}, x, rollout)
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    theirs, _ = compute_rollout_correction_weights(
        x.logp_old - rollout, x.mask.double(), rollout_is=level, rollout_is_threshold="0.5_2.0"
    )
    assert (theirs[x.mask] == 0).any() and (theirs[x.mask] > 0).any()
    compare(f"mis ({level})", f"verl rollout_is={level}, threshold 0.5_2.0", mine, theirs, x.mask, tol=F32_TOL)


RS_CASES = [
    ("token", "token_k1", None, 2.0),
    ("token", "token_k1", 0.6, 1.5),
    ("sequence", "seq_sum_k1", None, 2.0),
    ("sequence", "seq_sum_k1", 0.6, 1.5),
    ("geometric", "seq_mean_k1", None, 1.1),
    ("geometric", "seq_mean_k1", 0.95, 1.05),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("level,option,c_low,c_high", RS_CASES)
def test_rs_is_verl_rollout_rs_k1(seed, level, option, c_low, c_high):
    # verl's k1 statistic is -log(rho) = log(pi_rollout / pi_old): its "lower_upper" bounds 1/rho, so our
    # rho in [c_low, c_high] is verl's threshold "1/c_high _ 1/c_low" (the same string when symmetric).
    # The geometric mean of ~5 token ratios moves little: tighter bounds there (verl suggests 1.0001-1.001).
    x, rollout = correction_inputs(seed, level)
    mine = our_weight("rs", {"c_low": c_low, "c_high": c_high, "level": level}, x, rollout)
    lo = 1.0 / c_high if c_low is None else c_low
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_rejection_mask

    theirs, _ = compute_rollout_rejection_mask(
        x.logp_old - rollout, x.mask.double(), rollout_rs=option, rollout_rs_threshold=f"{1.0 / c_high!r}_{1.0 / lo!r}"
    )
    assert (theirs[x.mask] == 0).any() and (theirs[x.mask] == 1).any()
    compare(f"rs ({level})", f"verl rollout_rs={option}", mine, theirs, x.mask)


# dppo against verl compute_policy_loss_dppo_tv / dppo_kl: tests/components/test_offpolicy.py (max |diff| 0)
