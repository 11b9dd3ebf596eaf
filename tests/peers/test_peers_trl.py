"""Our components against TRL's own GRPOTrainer code (trl.trainer.grpo_trainer).

Runs only where trl is importable (e.g. `PYTHONPATH=/work/peers`, trl 1.16.0); skipped otherwise.
TRL's losses live inside `GRPOTrainer._compute_loss`, so we call that very method on a stand-in
`self` (`FakeTrainer`: the attributes it reads, a one-process accelerator, and a forward that
returns our log-prob tensor as the policy's), with float64 inputs, right-padded masks and several
seeds; values and gradients (w.r.t. logp) must agree to 1e-6. `pytest -s` prints
`PEER-DIFF mechanism | TRL mode | max |diff|` (docs/reference/components.md "Against the peers").

Conventions mapped here (ours -> TRL):
- loss_type is TRL's aggregation: grpo / sapo = seq_mean_token_mean; bnpo = token_mean;
  dr_grpo = seq_mean_token_sum_norm with L = max_completion_length; dapo / cispo = token_mean over
  `num_items_in_batch` (the step's tokens). One micro-batch, gradient_accumulation_steps 1.
- epsilon / epsilon_high are our eps_low / eps_high (1 - eps, 1 + eps) for the clip; for cispo TRL's
  epsilon_high caps r itself (min(r, epsilon_high), ScaleRL default 5.0) with no lower cap: our cispo
  eps_high = epsilon_high - 1, eps_low null.
- `delta` (two-sided clipping, min(r, delta) before the min) is our dual_clip with c = delta (and
  its alias two_sided_clip) when delta > 1 + eps_high.
- importance_sampling_level "sequence" (GSPO in TRL) is our gspo.
- TRL's advantages are one per completion [B]; ours are [N, T], the row's value broadcast.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from peer_inputs import SEEDS, compare, ours, random_inputs, require, value_and_grad

from zoo.core.types import StepCounts, StepView, TermInputs

grpo = pytest.importorskip("trl.trainer.grpo_trainer", reason="trl not installed (peer comparison)")
GRPOTrainer = grpo.GRPOTrainer


class OneProcess:
    """The accelerator calls _compute_loss makes, for one process."""

    num_processes = 1
    sync_gradients = True

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


class FakeTrainer:
    """Stand-in `self` for GRPOTrainer._compute_loss: its forward returns (logp, entropy, None)."""

    def __init__(
        self,
        logp,
        entropy=None,
        *,
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=None,
        delta=None,
        level="token",
        top_entropy_quantile=1.0,
        max_completion_length=None,
        tau_pos=1.0,
        tau_neg=1.05,
    ):
        self._logp = logp
        self._entropy = torch.zeros_like(logp) if entropy is None else entropy
        self.loss_type = loss_type
        self.epsilon_low = epsilon
        self.epsilon_high = epsilon if epsilon_high is None else epsilon_high
        self.importance_sampling_level = level
        self.top_entropy_quantile = top_entropy_quantile
        self.off_policy_mask_threshold = None
        self.beta = 0.0
        self.use_vllm = False
        self.vllm_importance_sampling_correction = False
        self.aux_loss_enabled = False
        self._entropy_bonus_enabled = False
        self.max_completion_length = max_completion_length if max_completion_length is not None else logp.shape[1]
        self.current_gradient_accumulation_steps = 1
        self.model = SimpleNamespace(training=True)
        self.accelerator = OneProcess()
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self.args = SimpleNamespace(
            delta=delta,
            sapo_temperature_pos=tau_pos,
            sapo_temperature_neg=tau_neg,
            use_bias_correction_kl=False,
            steps_per_generation=1,
        )

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self._logp, self._entropy, None

    def get_high_entropy_mask(self, entropies, mask, threshold):
        return GRPOTrainer.get_high_entropy_mask(self, entropies, mask, threshold)


def trl_loss(x, logp, **cfg):
    """TRL's loss on our inputs: advantages one per row (x.seq_adv), old log-probs x.logp_old."""
    n, t = x.mask.shape
    inputs = {
        "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
        "prompt_mask": torch.ones(n, 1, dtype=torch.long),
        "completion_ids": torch.zeros(n, t, dtype=torch.long),
        "completion_mask": x.mask.long(),
        "advantages": x.seq_adv,
        "old_per_token_logps": x.logp_old,
        "num_items_in_batch": x.mask.sum().double(),
    }
    entropy = cfg.pop("entropy", None)
    return GRPOTrainer._compute_loss(FakeTrainer(logp, entropy, **cfg), None, inputs)


def check(name: str, peer: str, clip, agg, x, tol: float = 1e-6, **cfg) -> None:
    v1, g1 = value_and_grad(lambda lp: ours(clip, agg, x, lp), x.logp)
    v2, g2 = value_and_grad(lambda lp: trl_loss(x, lp, **cfg), x.logp)
    compare(name, peer, v1, v2, tol=tol)
    compare(name, peer, g1, g2, tol=tol)


LOSS_TYPES = [
    ("grpo", "seq_mean_token_mean"),
    ("bnpo", "token_mean"),
    ("dapo", "token_mean"),
    ("dr_grpo", {"name": "seq_mean_token_sum_norm", "L": 12}),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("loss_type,agg", LOSS_TYPES)
def test_clip_higher_with_trl_loss_types(seed, loss_type, agg):
    x = random_inputs(seed, spread=0.4)
    check(
        "clip_higher",
        f"TRL loss_type={loss_type}",
        {"name": "clip_higher", "eps_low": 0.2, "eps_high": 0.28},
        agg,
        x,
        loss_type=loss_type,
        epsilon=0.2,
        epsilon_high=0.28,
        max_completion_length=12,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rule", ["dual_clip", "two_sided_clip"])
def test_dual_clip_is_trl_delta(seed, rule):
    if rule == "two_sided_clip":
        require("clip", rule)
    x = random_inputs(seed, spread=1.0)
    neg = (x.seq_adv[:, None] < 0) & x.mask
    i, j = neg.nonzero()[0].tolist()
    x.logp[i, j] = x.logp_old[i, j] + 2.0  # one A < 0 token at r = e^2 ~ 7.4, beyond delta
    assert (neg & ((x.logp - x.logp_old).exp() > 3.0)).any()  # delta acts
    spec = {"name": rule, "eps_low": 0.2, "eps_high": 0.28, ("c" if rule == "dual_clip" else "delta"): 3.0}
    check(
        rule,
        "TRL delta=3 (loss_type=dapo)",
        spec,
        "token_mean",
        x,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        delta=3.0,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_cispo_absolute_cap_is_our_one_plus_eps_high(seed):
    # TRL: w = min(r, epsilon_high) with epsilon_high 5.0 (absolute); ours: min(r, 1 + eps_high), eps_high 4.0
    x = random_inputs(seed, spread=1.0)
    x.logp[0, 0] = x.logp_old[0, 0] + 2.0  # r = e^2 ~ 7.4: the cap acts on this token at least
    check(
        "cispo",
        "TRL loss_type=cispo, epsilon_high=5.0",
        {"name": "cispo", "eps_low": None, "eps_high": 4.0},
        "token_mean",
        x,
        loss_type="cispo",
        epsilon_high=5.0,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_gspo_is_trl_sequence_level(seed):
    x = random_inputs(seed, spread=1e-3)
    check(
        "gspo",
        "TRL importance_sampling_level=sequence (loss_type=grpo)",
        {"name": "gspo"},
        "seq_mean_token_mean",
        x,
        loss_type="grpo",
        epsilon=3e-4,
        epsilon_high=4e-4,
        level="sequence",
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_sapo_is_trl_sapo(seed):
    require("clip", "sapo")
    x = random_inputs(seed, spread=0.5)
    check(
        "sapo",
        "TRL loss_type=sapo",
        {"name": "sapo", "tau_pos": 1.0, "tau_neg": 1.05},
        "seq_mean_token_mean",
        x,
        loss_type="sapo",
        tau_pos=1.0,
        tau_neg=1.05,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("rho", [0.2, 0.5])
def test_high_entropy_tokens_is_trl_top_entropy_quantile(seed, rho):
    # TRL keeps tokens with entropy >= the (1 - q)-quantile of the (local) batch: our high_entropy_tokens
    # with rho = q over one micro-batch's view. Compared as the mask and as the whole loss (ppo x mask).
    require("correction", "high_entropy_tokens")
    from zoo.core import registry

    x = random_inputs(seed, spread=0.4)
    g = torch.Generator().manual_seed(50 + seed)
    entropy = torch.where(
        x.mask,
        3 * torch.rand(x.mask.shape, generator=g, dtype=torch.float64),
        torch.full(x.mask.shape, 1e3, dtype=torch.float64),
    )  # padding above every real value
    # float32 values (as a model's entropies are): TRL takes the quantile in float32 and compares the
    # tensor's own dtype with it, so a float64 entropy just below its float32 rounding would drop out
    entropy = entropy.float().double()
    view = StepView(
        {"mask": x.mask, "entropy": entropy, "advantages": x.adv, "logp_old": x.logp_old}, torch.arange(x.mask.shape[0])
    )
    inp = TermInputs(
        logp=x.logp,
        logp_old=x.logp_old,
        advantages=x.adv,
        mask=x.mask,
        counts=StepCounts.of(x.mask),
        entropy=entropy,
        step=view,
    )
    weight = registry.build("correction", {"name": "high_entropy_tokens", "rho": rho})(inp)
    theirs = GRPOTrainer.get_high_entropy_mask(FakeTrainer(x.logp), entropy, x.mask.long(), 1 - rho)
    assert 0 < int(theirs.sum()) < int(x.mask.sum())
    compare("high_entropy_tokens", f"TRL get_high_entropy_mask (top_entropy_quantile={rho})", weight, theirs.double())

    def mine(lp):
        res = registry.build("clip", {"name": "clip_higher", "eps_low": 0.2, "eps_high": 0.28})(
            lp, x.logp_old, x.adv, x.mask
        )
        return registry.build("aggregate", "token_mean")(res.loss * weight, x.mask, StepCounts.of(x.mask))

    v1, g1 = value_and_grad(mine, x.logp)
    v2, g2 = value_and_grad(
        lambda lp: trl_loss(
            x, lp, loss_type="dapo", epsilon=0.2, epsilon_high=0.28, top_entropy_quantile=rho, entropy=entropy
        ),
        x.logp,
    )
    compare("high_entropy_tokens", f"TRL top_entropy_quantile={rho} (loss_type=dapo)", v1, v2)
    compare("high_entropy_tokens", f"TRL top_entropy_quantile={rho} (loss_type=dapo)", g1, g2)


def test_adaptive_entropy_is_trl_adaptive_entropy_control():
    # TRL (use_adaptive_entropy): per optimizer step, the bonus applied is coef * I[last entropy <= target]
    # and then coef += delta if entropy <= target else -= delta, clamped to [min, max]; before any step
    # the last entropy is +inf (bonus off), ours NaN (off). At entropy == target TRL adds delta, ours
    # leaves coef (measure zero; not in this sequence). Entropies cross the target both ways and the
    # coefficient hits the clamp at 0.
    require("controller", "adaptive_entropy")
    from zoo.core import registry

    target, delta = 0.2, 0.05
    ctrl = registry.build(
        "controller", {"name": "adaptive_entropy", "target": target, "delta": delta, "coef": 0.05, "max_coef": 1.0}
    )()
    x = random_inputs(0, spread=0.3)
    fake = FakeTrainer(x.logp, loss_type="dapo")
    fake._entropy_bonus_enabled = fake.use_adaptive_entropy = True
    fake.entropy_coef, fake._last_world_entropy, fake._entropy_window_stats = 0.05, float("inf"), None
    fake.args.entropy_target, fake.args.entropy_coef_delta = target, delta
    fake.args.entropy_coef_min, fake.args.entropy_coef_max = 0.0, 1.0
    applied, coefs = [], []
    # coef: 0.05 -> .1 .05 .1 .15 .1 .05 0 0 (clamped) 0 (clamped) .05 .1
    for e in [0.1, 0.3, 0.15, 0.12, 0.5, 0.6, 0.7, 0.8, 0.9, 0.1, 0.05]:
        fake._entropy = torch.full_like(x.logp, e)
        applied_ours = ctrl.coefficients()["entropy_bonus"]["coef"]
        inputs = {
            "prompt_ids": torch.zeros(6, 1, dtype=torch.long),
            "prompt_mask": torch.ones(6, 1, dtype=torch.long),
            "completion_ids": torch.zeros_like(x.mask, dtype=torch.long),
            "completion_mask": x.mask.long(),
            "advantages": x.seq_adv,
            "old_per_token_logps": x.logp_old,
            "num_items_in_batch": x.mask.sum().double(),
        }
        loss = GRPOTrainer._compute_loss(fake, None, inputs)
        applied_trl = (fake._metrics["train"]["policy_loss"][-1] - float(loss)) / e  # loss = policy - coef * H
        ctrl.update({"entropy": e}, tokens=float(x.mask.sum()), rows=6.0)
        applied.append(applied_ours)
        coefs.append(ctrl.coef)
        compare(
            "adaptive_entropy",
            "TRL use_adaptive_entropy (coef applied)",
            torch.tensor(applied_ours),
            torch.tensor(applied_trl),
        )
        compare(
            "adaptive_entropy",
            "TRL use_adaptive_entropy (next coef)",
            torch.tensor(ctrl.coef),
            torch.tensor(fake.entropy_coef),
        )
    assert max(applied) > 0 and applied[0] == 0  # the bonus is on in some steps, off before any entropy
    assert coefs[7] == coefs[8] == 0.0  # the clamp at 0 acted


# TRL's vllm_importance_sampling_mode (token/sequence x truncate/mask) is computed inline in
# _generate_and_score_completions (no callable piece); our tis / mis are compared with verl's
# rollout_corr_helper instead (tests/peers/test_peers_verl.py). off_policy_sequence_mask against TRL's
# GRPOTrainer.get_off_policy_mask: tests/components/test_offpolicy.py.
