"""docs/reference/components.md "Against the peers": the size of each convention where zoo and verl / TRL
differ, on a small hand-made input (issue 34 §3). Each test computes zoo's number with zoo's own
component and the peer's with a few lines reproducing the peer's rule as read in its source (named
per test), and asserts both, so the numbers in the doc cannot drift without a test failing."""

import math

import pytest
import torch

from zoo.components.advantage.peer import opo, otb_baseline
from zoo.components.aggregate import seq_mean_token_mean, seq_mean_token_sum, token_mean
from zoo.components.clip.cov import kl_cov_selection
from zoo.components.clip.divergence import dppo
from zoo.components.clip.peer import luspo, vespo, vespo_weight
from zoo.components.clip.ppo import cispo, ppo, two_sided_clip
from zoo.components.clip.soft import gmpo, sapo
from zoo.components.controllers import AdaptiveEntropy
from zoo.components.correction.base import mis, tis
from zoo.components.correction.entropy import top_entropy_mask
from zoo.components.correction.m2po import icepop
from zoo.components.correction.offpolicy import off_policy_sequence_mask
from zoo.components.loss.base import kl
from zoo.components.normalize import batch_std, group_std
from zoo.core.types import AdvantageInputs, StepCounts, TermInputs


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


def _ones(n, t):
    return torch.ones(n, t, dtype=torch.bool)


def test_ppo_without_dual_clip_against_verls_vanilla():
    """verl core_algos `compute_policy_loss_vanilla` always dual-clips (clip_ratio_c 3): for A < 0 the loss
    is min(max(-A r, -A clip(r)), -A c). Ratio 10, A = -1: zoo `ppo` 10, verl 3."""
    res = ppo(_t([[math.log(10.0)]]), _t([[0.0]]), _t([[-1.0]]), _ones(1, 1))
    r, a, c = 10.0, -1.0, 3.0
    verl = min(max(-a * r, -a * min(max(r, 0.8), 1.2)), -a * c)
    assert res.loss.item() == pytest.approx(10.0) and verl == 3.0


def test_cispo_lower_cap_against_verls_default():
    """verl `compute_policy_loss_cispo` caps r below at 1 - clip_ratio_low (0.2 by default); zoo's default
    has no lower cap (TRL's). r = 0.5, A = 1: gradient weight (d loss / d logp) 0.5 here, 0.8 with
    verl's default (our `eps_low: 0.2`)."""
    out = {}
    for eps_low in (None, 0.2):
        logp = _t([[math.log(0.5)]]).requires_grad_(True)
        res = cispo(logp, _t([[0.0]]), _t([[1.0]]), _ones(1, 1), eps_low=eps_low)
        (g,) = torch.autograd.grad(res.loss.sum(), logp)
        out[eps_low] = -g.item()
    assert out[None] == pytest.approx(0.5) and out[0.2] == pytest.approx(0.8)


def _two_rows():
    """Rows of 1 and 3 real tokens, A = +1 and -1, ratio 1 everywhere."""
    mask = torch.tensor([[True, False, False], [True, True, True]])
    adv = _t([[1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    z = torch.zeros(2, 3, dtype=torch.float64)
    return z, z.clone(), adv, mask


def test_sapo_aggregation_against_verl_that_ignores_loss_agg_mode():
    """verl `compute_policy_loss_sapo` takes the sequence-mean of token-means whatever loss_agg_mode says.
    At r = 1 SAPO's token loss is -(2 / tau) A: -2 on the 1-token row (A = 1, tau_pos 1), 2 / 1.05 on each
    of the 3 tokens of the other (A = -1, tau_neg 1.05). zoo `sapo` + `token_mean` (verl's loss_agg_mode
    token-mean): (-2 + 3 x 1.904762) / 4 = 0.928571; verl: (-2 + 1.904762) / 2 = -0.047619."""
    logp, old, adv, mask = _two_rows()
    res = sapo(logp, old, adv, mask)
    counts = StepCounts.of(mask)
    ours = token_mean(res.loss, mask, counts).item()
    verl = seq_mean_token_mean(res.loss, mask, counts).item()  # verl's fixed rule, also our seq_mean_token_mean
    assert ours == pytest.approx((-2 + 3 * 2 / 1.05) / 4) == pytest.approx(0.928571, abs=1e-6)
    assert verl == pytest.approx((-2 + 2 / 1.05) / 2) == pytest.approx(-0.047619, abs=1e-6)


def test_gmpo_aggregation_against_verl_that_ignores_loss_agg_mode():
    """verl `compute_policy_loss_geo_mean` averages over rows whatever loss_agg_mode says. At r = 1 each
    token of row i carries -A_i: zoo `gmpo` + `token_mean` (-1 + 3) / 4 = 0.5; verl (-1 + 1) / 2 = 0."""
    logp, old, adv, mask = _two_rows()
    res = gmpo(logp, old, adv, mask)
    counts = StepCounts.of(mask)
    assert token_mean(res.loss, mask, counts).item() == pytest.approx(0.5)
    assert seq_mean_token_mean(res.loss, mask, counts).item() == pytest.approx(0.0, abs=1e-12)


def test_one_member_group_against_verls_grpo_outcome():
    """verl `compute_grpo_outcome_advantage` gives a group of one mean 0 and std 1, so its advantage is
    score / (1 + epsilon 1e-6); zoo's group_mean + group_std give a lone member 0. Score 1: 0 vs 0.999999."""
    mask, gids = _ones(3, 1), torch.tensor([0, 0, 1])
    scores = _t([0.0, 1.0, 1.0])
    centred = scores - torch.stack([scores[gids == g].mean() for g in gids])  # group_mean: s - group mean
    ours = group_std(centred[:, None], mask, gids)[:, 0]
    verl_lone = (1.0 - 0.0) / (1.0 + 1e-6)
    assert ours[2].item() == 0.0 and verl_lone == pytest.approx(0.999999, abs=1e-7)
    assert ours[:2].tolist() == pytest.approx([-0.5 / (0.5**0.5 + 1e-6), 0.5 / (0.5**0.5 + 1e-6)])


def test_batch_std_against_verls_masked_whiten():
    """verl `masked_whiten` (reinforce_plus_plus, reinforce_plus_plus_baseline, gae): (x - mean) *
    rsqrt(var + 1e-8), var unbiased; zoo `batch_std` (shift_mean): (x - mean) / (std + 1e-6). Tokens
    [1, 0, 0, 1]: mean 0.5, var 1/3; the 1-tokens get 0.8660239 here, 0.8660254 in verl (1.5e-6)."""
    adv, mask = _t([[1.0, 0.0], [0.0, 1.0]]), _ones(2, 2)
    ours = batch_std(adv, mask, torch.tensor([0, 1]), shift_mean=True)[0, 0].item()
    x = adv.flatten()
    verl = ((x - x.mean()) * torch.rsqrt(x.var(unbiased=True) + 1e-8))[0].item()
    assert ours == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-6), rel=1e-12) == pytest.approx(0.8660239, abs=1e-7)
    assert verl == pytest.approx(0.8660254, abs=1e-7) and verl - ours == pytest.approx(1.5e-6, abs=1e-7)


def test_two_sided_clip_at_a_delta_trl_accepts():
    """TRL `_compute_loss` with `delta`: -min(min(r, delta) A, clip(r, 1 - eps, 1 + eps) A), any delta.
    delta 1.1 (<= 1 + eps_high 1.2), r 1.15, A 1: TRL -1.1 where plain PPO gives -1.15; zoo refuses it."""
    r, a, delta, eps = 1.15, 1.0, 1.1, 0.2
    trl = -min(min(r, delta) * a, min(max(r, 1 - eps), 1 + eps) * a)
    assert trl == pytest.approx(-1.1)
    assert ppo(_t([[math.log(r)]]), _t([[0.0]]), _t([[a]]), _ones(1, 1)).loss.item() == pytest.approx(-1.15)
    with pytest.raises(ValueError, match="delta"):
        two_sided_clip(_t([[math.log(r)]]), _t([[0.0]]), _t([[a]]), _ones(1, 1), delta=delta)


def test_dppo_rollout_anchor_against_verls_old_anchor():
    """verl `compute_policy_loss_dppo_tv` anchors at old_log_prob (our `anchor: old`); zoo's default is
    the paper's `anchor: rollout`. pi = pi_old = 0.5, sampler 0.4, A = 1: |0.5 - 0.4| = 0.1 is inside
    delta 0.15 either way; the gradient weight is pi / mu = 1.25 here, pi / pi_old = 1 in verl."""
    out = {}
    for anchor in ("rollout", "old"):
        logp = _t([[math.log(0.5)]]).requires_grad_(True)
        res = dppo(
            logp, _t([[math.log(0.5)]]), _t([[1.0]]), _ones(1, 1), logp_rollout=_t([[math.log(0.4)]]), anchor=anchor
        )
        (g,) = torch.autograd.grad(res.loss.sum(), logp)
        out[anchor] = -g.item()
    assert out["rollout"] == pytest.approx(1.25) and out["old"] == pytest.approx(1.0)


def test_luspo_normaliser_against_trls_accumulation_count():
    """TRL loss_type `luspo`: each micro-batch's mean_i (L_i |o_i|), divided by the gradient-accumulation
    count; zoo `luspo` + `seq_mean_token_sum`: sum_i L_i |o_i| over the step / the step's sequences. At
    ratio 1 with A = -1, L_i |o_i| = |o_i|; rows of 1, 1, 1 tokens in one micro-batch and 5 in another:
    TRL (1 + 5) / 2 = 3, zoo (1 + 1 + 1 + 5) / 4 = 2 (equal when the micro-batches hold as many rows)."""
    step = torch.zeros(4, 5, dtype=torch.bool)
    for i, n in enumerate([1, 1, 1, 5]):
        step[i, :n] = True
    counts = StepCounts.of(step)
    micro = (step[:3], step[3:])  # 3 rows, 1 row
    ours, trl = 0.0, 0.0
    for mask in micro:
        z = torch.zeros(mask.shape, dtype=torch.float64)
        res = luspo(z, z.clone(), -torch.ones_like(z), mask)
        ours += seq_mean_token_sum(res.loss, mask, counts).item()
        trl += (res.loss * mask).sum(-1).mean().item() / len(micro)
    assert ours == pytest.approx(2.0) and trl == pytest.approx(3.0)


def test_kl_bias_correction_token_ratio_against_trls_sequence_ratio():
    """TRL `use_bias_correction_kl` multiplies k3 by its policy ratio coef_1, which at
    importance_sampling_level "sequence" is the row's geometric mean; zoo multiplies by each token's
    ratio. Token ratios [2, 1], log(pi / pi_ref) = -log 2 on both (k3 = 2 - log 2 - 1 = 0.306853):
    zoo's token mean (2 + 1) x 0.306853 / 2 = 0.460279, TRL's sqrt(2) x 0.306853 = 0.433955."""
    logp = _t([[0.0, 0.0]])
    old = _t([[-math.log(2.0), 0.0]])
    ref = _t([[math.log(2.0), math.log(2.0)]])
    mask = _ones(1, 2)
    inp = TermInputs(logp, old, torch.zeros(1, 2), mask, StepCounts.of(mask), logp_ref=ref)
    ours = kl(inp, beta=1.0, bias_correction=True).loss.mean().item()
    k3 = 2 - math.log(2.0) - 1
    trl = math.exp((logp - old).mean().item()) * k3
    assert ours == pytest.approx(1.5 * k3) == pytest.approx(0.460279, abs=1e-6)
    assert trl == pytest.approx(0.433955, abs=1e-6)


def _inputs(logp, old, adv, roll):
    mask = _ones(*_t(logp).shape)
    return TermInputs(_t(logp), _t(old), _t(adv), mask, StepCounts.of(mask), logp_rollout=_t(roll))


def test_vespo_with_a_rollout_correction_against_trls_folded_ratio():
    """TRL `get_gamma_weights` folds the vLLM token IS ratios into w (log w + sum_t log IS_t) and applies no
    other IS weight to vespo; zoo multiplies the loss by the `correction` weight instead. One row, pi =
    pi_old (w = 1), sampler ratios pi_old / pi_rollout = [2, 0.5, 1.5], A = 1: TRL's gradient weight on
    every token phi(1.5) = exp(3 + 2 log 1.5 - 4.5) = 0.502043; zoo's `vespo` x `tis` [2, 0.5, 1.5]."""
    rho = [2.0, 0.5, 1.5]
    inp = _inputs([[0.0] * 3], [[0.0] * 3], [[1.0] * 3], [[-math.log(r) for r in rho]])
    logp = inp.logp.clone().requires_grad_(True)
    res = vespo(logp, inp.logp_old, inp.advantages, inp.mask)
    (g,) = torch.autograd.grad((res.loss * tis(inp).double()).sum(), logp)
    trl_w = vespo_weight(_t([[sum(math.log(r) for r in rho)]]), _t([[1.0]]), 2.0, 3.0, 3.0, 2.0).item()
    assert (-g[0]).tolist() == pytest.approx(rho, rel=1e-6)
    assert trl_w == pytest.approx(math.exp(3 + 2 * math.log(1.5) - 4.5)) == pytest.approx(0.502043, abs=1e-6)


def test_off_policy_sequence_mask_per_token_advantage_against_trls_per_row():
    """TRL `get_off_policy_mask` reads one advantage per row (TRL's are per sequence); zoo reads each token's.
    Under a token-level estimator, a row past delta (mean log(pi_rollout / pi) = 1 > 0.5) with A = [1, -3]
    (row mean -1): zoo drops the A < 0 token only, weights [1, 0]; TRL's rule drops the row, [0, 0]."""
    inp = _inputs([[0.0, 0.0]], [[0.0, 0.0]], [[1.0, -3.0]], [[1.0, 1.0]])
    ours = off_policy_sequence_mask(inp)
    row = TermInputs(inp.logp, inp.logp_old, _t([[-1.0, -1.0]]), inp.mask, inp.counts, logp_rollout=inp.logp_rollout)
    assert ours.tolist() == [[1.0, 0.0]] and off_policy_sequence_mask(row).tolist() == [[0.0, 0.0]]


def test_high_entropy_tokens_over_the_step_against_trls_local_batch():
    """TRL `get_high_entropy_mask` selects within each local batch (our `scope: micro`); zoo's default
    selects over the optimizer step. Entropies [1, 2] and [3, 4] in two micro-batches, rho 0.5: the step
    keeps 3 and 4, TRL 2 and 4 (half the kept tokens differ)."""
    ent, mask = _t([[1.0, 2.0], [3.0, 4.0]]), _ones(2, 2)
    step = top_entropy_mask(ent, mask, 0.5)
    local = torch.cat([top_entropy_mask(ent[i : i + 1], mask[i : i + 1], 0.5) for i in range(2)])
    assert ent[step].tolist() == [3.0, 4.0] and ent[local].tolist() == [2.0, 4.0]


def test_icepop_band_against_verls_example():
    """zoo `icepop` = `mis` in [0.5, 5] (Ring-1T); verl's "0.5_2.0" example masks outside [0.5, 2]. A token
    with pi_old / pi_rollout = 3: weight 3 here, 0 there."""
    inp = _inputs([[0.0]], [[0.0]], [[1.0]], [[-math.log(3.0)]])
    assert icepop(inp).item() == pytest.approx(3.0, rel=1e-6)
    assert mis(inp, c_low=0.5, c_high=2.0).item() == 0.0


def test_otb_without_the_rollout_is_scaling_of_verl():
    """verl `compute_optimal_token_baseline_advantage` scales each token's energy by the rollout IS weight
    squared before the cumulative sum, when given; zoo's `otb` does not. One group of two 1-token rows,
    returns [1, 0], energies [1, 1], IS weights [2, 1]: zoo's baseline 0.5 (advantages [0.5, -0.5]),
    verl's 4 / 5 = 0.8 ([0.2, -0.8])."""
    g, e, mask, gids = _t([[1.0], [0.0]]), _t([[1.0], [1.0]]), _ones(2, 1), torch.tensor([0, 0])
    ours = otb_baseline(g, e, mask, gids)
    verl = otb_baseline(g, e * _t([[2.0], [1.0]]) ** 2, mask, gids)  # verl's W from rho^2 x energy
    assert (g - ours)[:, 0].tolist() == pytest.approx([0.5, -0.5]) and (g - verl)[:, 0].tolist() == pytest.approx(
        [0.2, -0.8]
    )


def test_seq_mean_over_every_row_against_verls_non_empty_rows():
    """verl `agg_loss` (seq-mean-token-mean, no global_batch_size) divides by the rows with a real token; zoo
    by every row of the step. Row losses 1 and 2 and a row without real tokens: zoo 3 / 3 = 1, verl 3 / 2."""
    mask = torch.tensor([[True], [True], [False]])
    loss = _t([[1.0], [2.0], [0.0]])
    ours = seq_mean_token_mean(loss, mask, StepCounts.of(mask)).item()
    rows = mask.any(-1)
    verl = ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1))[rows].sum().item() / rows.sum().item()
    assert ours == pytest.approx(1.0) and verl == pytest.approx(1.5)


def test_kl_cov_over_the_step_against_verls_micro_batch_call():
    """verl `compute_policy_loss_kl_cov` selects within each micro-batch call (our `scope: micro`); zoo's
    default selects over the optimizer step. Two micro-batches, logp [0, 1, 2] / [3, 4, 5], A [0, 0, 3] /
    [2, 1, 0], ratio 1/3: over the step the covariances (means 2.5 and 1) are [2.5, 1.5, -1, 0.5, 0, -2.5],
    so the step picks the tokens of logp 0 and 1; per micro-batch (means 1, 1 and 4, 1) the tokens of logp
    2 and 4: no token in common."""
    logp, adv = _t([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]), _t([[0.0, 0.0, 3.0], [2.0, 1.0, 0.0]])
    fields = {"logp": logp, "advantages": adv, "mask": _ones(2, 3), "completion_ids": torch.arange(6).view(2, 3)}
    step = kl_cov_selection(fields, ratio=1 / 3)
    micro = torch.cat([kl_cov_selection({k: v[i : i + 1] for k, v in fields.items()}, ratio=1 / 3) for i in range(2)])
    assert logp[step].tolist() == [0.0, 1.0] and logp[micro].tolist() == [2.0, 4.0]


def test_opo_one_member_group_against_verls_zero_baseline():
    """verl `compute_opo_outcome_advantage` gives a group of one the baseline 0, so A = score; zoo's `opo`
    gives a lone member 0. Score 1: verl 1, zoo 0 (the two-member group is the same in both: 0.5, -0.5)."""
    s = _t([1.0, 0.0, 1.0])
    mask, gids = _ones(3, 1), torch.tensor([0, 0, 1])
    ours = opo(AdvantageInputs(s, mask, gids, torch.zeros(3, 1, dtype=torch.float64))).advantages[:, 0]
    assert ours.tolist() == pytest.approx([0.5, -0.5, 0.0]) and s[2].item() - 0.0 == 1.0  # verl: score - 0


def test_adaptive_entropy_at_the_target_against_trls_step():
    """TRL `use_adaptive_entropy` raises the coefficient by delta unless the entropy is above the target;
    zoo keeps it at the target (the paper's three cases). c = 0.01, entropy = target 0.2: zoo 0.01, TRL 0.015."""
    c = AdaptiveEntropy(target=0.2, delta=0.005, coef=0.01, max_coef=1.0)
    c.update({"entropy": 0.2}, 10.0, 2.0)
    trl = 0.01 + 0.005 if not 0.2 > 0.2 else 0.01 - 0.005
    assert c.coef == pytest.approx(0.01) and trl == pytest.approx(0.015)
