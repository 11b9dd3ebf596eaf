"""The mechanisms taken from TRL's code (issue 34) against TRL's own `GRPOTrainer._compute_loss`:
VESPO (loss_type vespo), LUSPO (loss_type luspo) and the bias-corrected KL (use_bias_correction_kl).

Runs only where trl is importable (e.g. a checkout of TRL's `trl/` package on PYTHONPATH); skipped
otherwise. The same stand-in `self` as tests/peers/test_peers_trl.py, with the GRPOConfig fields these
modes read. Values and gradients w.r.t. logp must agree to 1e-6 over the seeds; `pytest -s` prints
PEER-DIFF lines.
"""

from __future__ import annotations

import pytest
import torch
from peer_inputs import SEEDS, compare, ours, random_inputs, value_and_grad
from test_peers_trl import FakeTrainer, GRPOTrainer

from zoo.core import registry
from zoo.core.types import StepCounts, TermInputs

VESPO = {"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0}


def trl_loss(x, logp, *, ref=None, beta=0.0, bias_correction=False, **cfg):
    n, t = x.mask.shape
    trainer = FakeTrainer(logp, **cfg)
    trainer.beta = beta
    trainer.args.use_bias_correction_kl = bias_correction
    for k, v in VESPO.items():
        setattr(trainer.args, k, v)
    trainer.get_gamma_weights = GRPOTrainer.get_gamma_weights  # a staticmethod on the real class
    inputs = {
        "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
        "prompt_mask": torch.ones(n, 1, dtype=torch.long),
        "completion_ids": torch.zeros(n, t, dtype=torch.long),
        "completion_mask": x.mask.long(),
        "advantages": x.seq_adv,
        "old_per_token_logps": x.logp_old,
        "num_items_in_batch": x.mask.sum().double(),
    }
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    return GRPOTrainer._compute_loss(trainer, None, inputs)


def check(name, peer, mine, theirs, x):
    v1, g1 = value_and_grad(mine, x.logp)
    v2, g2 = value_and_grad(theirs, x.logp)
    compare(name, peer, v1, v2)
    compare(name, peer, g1, g2)


@pytest.mark.parametrize("seed", SEEDS)
def test_vespo_is_trl_loss_type_vespo(seed):
    x = random_inputs(seed, spread=0.3)
    check(
        "vespo",
        "TRL loss_type=vespo",
        lambda lp: ours("vespo", "token_mean", x, lp),
        lambda lp: trl_loss(x, lp, loss_type="vespo"),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_luspo_is_trl_loss_type_luspo(seed):
    x = random_inputs(seed, spread=1e-3)  # GSPO's tight clip acts on some rows, not all
    spec = {"name": "luspo", "eps_low": 3e-4, "eps_high": 4e-4}
    check(
        "luspo",
        "TRL loss_type=luspo, importance_sampling_level=sequence",
        lambda lp: ours(spec, "seq_mean_token_sum", x, lp),
        lambda lp: trl_loss(x, lp, loss_type="luspo", level="sequence", epsilon=3e-4, epsilon_high=4e-4),
        x,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_bias_corrected_kl_is_trls(seed):
    x = random_inputs(seed, spread=0.3)
    g = torch.Generator().manual_seed(100 + seed)
    ref = x.logp_old + 0.5 * torch.randn(x.mask.shape, generator=g, dtype=torch.float64)
    beta = 0.1
    agg = registry.build("aggregate", "token_mean")
    term = registry.build("loss", {"name": "kl", "estimator": "k3", "beta": beta, "bias_correction": True})

    def mine(lp):
        res = registry.build("clip", {"name": "clip_higher", "eps_low": 0.2, "eps_high": 0.28})(
            lp, x.logp_old, x.adv, x.mask
        )
        inp = TermInputs(lp, x.logp_old, x.adv, x.mask, StepCounts.of(x.mask), logp_ref=ref)
        return agg(res.loss + term(inp).loss, x.mask, StepCounts.of(x.mask))

    check(
        "kl bias_correction",
        "TRL use_bias_correction_kl (loss_type=dapo, beta 0.1)",
        mine,
        lambda lp: trl_loss(
            x, lp, ref=ref, beta=beta, bias_correction=True, loss_type="dapo", epsilon=0.2, epsilon_high=0.28
        ),
        x,
    )
