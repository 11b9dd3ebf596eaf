"""The peers' policy losses (gpg, dro, vespo, luspo), the bypass anchor, the corrections m2po and
icepop, tis's lower bound and the sequence / geometric levels: hand-worked cases, NaN/inf padding,
row permutations."""

import math

import pytest
import torch

from zoo.components.clip.bypass import bypass
from zoo.components.clip.peer import dro, gpg, luspo, vespo
from zoo.components.clip.ppo import gspo, ppo
from zoo.components.correction.base import mis, tis
from zoo.components.correction.m2po import icepop, m2po, second_moment_keep
from zoo.core.registry import ComponentError, build
from zoo.core.types import StepCounts, StepView, TermInputs

NAN, INF = float("nan"), float("inf")


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


def _grad(res, logp):
    (g,) = torch.autograd.grad(res.loss.sum(), logp)
    return g


def test_gpg_is_minus_a_log_pi():
    logp = _t([[math.log(0.5), -1.0]]).requires_grad_(True)
    res = gpg(logp, _t([[0.0, 0.0]]), _t([[2.0, -1.0]]), torch.tensor([[True, True]]))
    torch.testing.assert_close(res.loss, _t([[2 * math.log(2), -1.0]]))
    assert _grad(res, logp).tolist() == [[-2.0, 1.0]]


def test_dro_matches_verls_own_test_case():
    # verl tests: old [-1, -0.7, -0.2], logp [-0.8, -0.9, -0.1], A [2, -1.5, 9], mask [1, 1, 0], beta 0.05
    logp = _t([[-0.8, -0.9, -0.1]]).requires_grad_(True)
    res = dro(logp, _t([[-1.0, -0.7, -0.2]]), _t([[2.0, -1.5, 9.0]]), torch.tensor([[1, 1, 0]]), beta=0.05)
    # -(logp A - beta/2 (logp - old)^2): 1.6 + 0.001, -1.35 + 0.001, 0 on padding; token-mean 0.126
    torch.testing.assert_close(res.loss, _t([[1.601, -1.349, 0.0]]))
    torch.testing.assert_close(_grad(res, logp), _t([[-1.99, 1.49, 0.0]]))
    with pytest.raises(ComponentError, match="beta"):
        build("clip", {"name": "dro", "beta": 0.0})


def test_vespo_gamma_weight_of_the_sequence_product():
    # one row, log-ratios 0.1 and -0.3: log w = -0.2 (the sum, i.e. the product of the ratios)
    logp = _t([[0.1, -0.3], [0.1, -0.3]]).requires_grad_(True)
    adv = _t([[1.0, 1.0], [-1.0, -1.0]])
    res = vespo(logp, torch.zeros(2, 2, dtype=torch.float64), adv, torch.ones(2, 2, dtype=torch.bool))
    # A >= 0: exp(3 + 2 (-0.2) - 3 e^-0.2) = 1.1546621; A < 0: exp(2 + 3 (-0.2) - 2 e^-0.2) = 0.7886272
    torch.testing.assert_close(
        _grad(res, logp), _t([[-1.1546621, -1.1546621], [0.7886272, 0.7886272]]), rtol=1e-6, atol=0
    )
    at_one = vespo(logp.detach(), logp.detach(), adv, torch.ones(2, 2, dtype=torch.bool))
    torch.testing.assert_close(at_one.loss, -adv * logp.detach())  # phi(1) = 1: plain -A log pi


def test_luspo_is_gspos_rule_and_its_variant_sums_over_tokens():
    from zoo.config.variant import load_variant

    g = torch.Generator().manual_seed(0)
    logp, old, adv = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.arange(4)[None, :] < torch.tensor([[4], [2], [1]])
    a, b = luspo(logp, old, adv, mask, eps_low=0.1, eps_high=0.2), gspo(logp, old, adv, mask, eps_low=0.1, eps_high=0.2)
    torch.testing.assert_close(a.loss, b.loss, atol=0, rtol=0)
    v = load_variant("luspo")
    assert v.slots.clip["name"] == "luspo" and v.slots.aggregate == "seq_mean_token_sum"
    # seq_mean_token_sum of a row-constant loss L_i over |o_i| tokens = mean_i L_i |o_i| (TRL's luspo)
    row = a.loss[:, 0]
    agg = build("aggregate", "seq_mean_token_sum")(a.loss, mask, StepCounts.of(mask))
    torch.testing.assert_close(agg, (row * mask.sum(1)).mean())


def test_bypass_is_the_inner_rule_against_the_sampler():
    g = torch.Generator().manual_seed(1)
    logp = torch.randn(3, 4, generator=g, dtype=torch.float64).requires_grad_(True)
    old, roll, adv = (torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(3, 4, dtype=torch.bool)
    res = bypass(logp, old, adv, mask, logp_rollout=roll, rule={"name": "ppo", "eps": 0.2})
    ref = ppo(logp, roll, adv, mask, eps=0.2)
    torch.testing.assert_close(res.loss, ref.loss, atol=0, rtol=0)
    with pytest.raises(ValueError, match="logp_rollout"):
        bypass(logp, old, adv, mask, rule="ppo")


@pytest.mark.parametrize("inner", ["dppo", "clip_cov", "kl_cov", {"name": "bypass", "rule": "ppo"}])
def test_bypass_refuses_rules_that_do_not_compose(inner):
    with pytest.raises(ComponentError, match="cannot wrap"):
        build("clip", {"name": "bypass", "rule": inner})


CLIPS = {
    "gpg": gpg,
    "dro": dro,
    "vespo": vespo,
    "luspo": lambda *a: luspo(*a, eps_low=0.1, eps_high=0.1),
    "bypass": lambda lp, old, adv, m: bypass(lp, old, adv, m, logp_rollout=old - 0.3, rule="clip_higher"),
}


def _random(n=6, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = (-1.5 + 0.5 * torch.randn(n, t, generator=g, dtype=torch.float64)).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(n, t, generator=g, dtype=torch.float64)
    adv = torch.randn(n, 1, generator=g, dtype=torch.float64).expand(n, t).clone()
    mask = torch.arange(t)[None, :] < torch.tensor([5, 2, 4, 1, 3, 5][:n])[:, None]
    return logp, old, adv, mask


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_padding_garbage_changes_neither_loss_nor_gradient(name):
    logp, old, adv, mask = _random(seed=3)
    res = CLIPS[name](logp, old, adv, mask)
    g = _grad(res, logp)
    bad = lambda x, v: torch.where(~mask, torch.full_like(x, v), x.detach())  # noqa: E731
    logp2 = bad(logp, NAN).requires_grad_(True)
    res2 = CLIPS[name](logp2, bad(old, INF), bad(adv, -INF), mask)
    torch.testing.assert_close(res2.loss, res.loss, atol=0, rtol=0)
    torch.testing.assert_close(_grad(res2, logp2), g, atol=0, rtol=0)
    assert (res.loss[~mask] == 0).all() and (g != 0).any()


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_permuting_rows_permutes_loss_and_gradient(name):
    logp, old, adv, mask = _random(seed=4)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    res = CLIPS[name](logp, old, adv, mask)
    lp = logp.detach()[perm].clone().requires_grad_(True)
    res_p = CLIPS[name](lp, old[perm], adv[perm], mask[perm])
    torch.testing.assert_close(res_p.loss, res.loss[perm], atol=1e-12, rtol=0)
    torch.testing.assert_close(_grad(res_p, lp), _grad(res, logp)[perm], atol=1e-12, rtol=0)


# ---------------------------------------------------------------- corrections
def _term(old, roll, mask, step=None):
    old, roll = _t(old), _t(roll)
    m = torch.tensor(mask, dtype=torch.bool)
    return TermInputs(old.clone(), old, torch.zeros_like(old), m, StepCounts.of(m), logp_rollout=roll, step=step)


def test_m2po_masks_the_largest_squared_log_ratios_until_the_mean_is_below_tau():
    d2 = _t([0.01, 0.25, 0.01, 0.09])  # mean 0.09
    assert second_moment_keep(d2, 0.04).tolist() == [True, False, True, True]  # left: mean 0.0367
    assert second_moment_keep(d2, 0.02).tolist() == [True, False, True, False]  # left: mean 0.01
    assert second_moment_keep(d2, 0.1).tolist() == [True] * 4
    # a tie is masked together (row order cannot decide which copy goes): [0.25, 0.25, 0, 0], tau 0.1
    assert second_moment_keep(_t([0.25, 0.0, 0.25, 0.0]), 0.1).tolist() == [False, True, False, True]


def test_m2po_selects_over_the_step_view():
    old = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    roll = [[0.1, 0.5, NAN], [-0.1, 0.3, INF]]  # d^2 = .01, .25 | .01, .09; padding never read
    mask = [[1, 1, 0], [1, 1, 0]]
    whole = _term(old, roll, mask)
    fields = {"mask": whole.mask, "logp_old": whole.logp_old, "logp_rollout": whole.logp_rollout}
    step = StepView(fields, torch.tensor([1]))  # this micro-batch is row 1 of the step
    mb = _term([old[1]], [roll[1]], [mask[1]], step=step)
    assert m2po(mb, tau=0.04).tolist() == [[1.0, 1.0, 0.0]]  # the 0.25 of row 0 is what the step masks
    with pytest.raises(ValueError, match="step view"):
        m2po(_term(old, roll, mask))


def test_icepop_is_the_mis_band():
    g = torch.Generator().manual_seed(7)
    old = torch.randn(4, 6, generator=g, dtype=torch.float64)
    roll = old + torch.randn(4, 6, generator=g, dtype=torch.float64)
    m = torch.arange(6)[None, :] < torch.tensor([[6], [3], [1], [5]])
    inp = TermInputs(old, old, torch.zeros_like(old), m, StepCounts.of(m), logp_rollout=roll)
    for level in ("token", "sequence", "geometric"):
        torch.testing.assert_close(
            icepop(inp, level=level), mis(inp, c_low=0.5, c_high=5.0, level=level), atol=0, rtol=0
        )
    assert build("correction", "icepop").resolved() == {"c_low": 0.5, "c_high": 5.0, "level": "token"}
    assert ((icepop(inp) == 0) & m).any() and ((icepop(inp) > 0) & m).any()


def test_tis_lower_bound():
    lr = [math.log(0.5), 0.0, math.log(4.0)]
    inp = _term([lr], [[0.0, 0.0, 0.0]], [[1, 1, 1]])
    torch.testing.assert_close(tis(inp, C=2.0, C_low=0.8), _t([[0.8, 1.0, 2.0]]).float())
    torch.testing.assert_close(tis(inp, C=2.0), _t([[0.5, 1.0, 2.0]]).float())
    with pytest.raises(ComponentError, match="C_low"):
        build("correction", {"name": "tis", "C_low": 1.5})


def test_sequence_is_the_product_and_geometric_the_mean_of_the_token_ratios():
    """TRL #5814's numbers: per-token log rho = -0.0113 (rho 0.9888, "~1") over 50 and 250 tokens. The
    product (level sequence) is 0.568 and 0.0593, the ratios that issue reported where ~1 was meant;
    the geometric mean (level geometric) stays 0.9888 at any length. Each level gives its own value,
    so a variant that names one cannot silently get the other."""
    for length, product in ((50, 0.5683601), (250, 0.0593087)):
        inp = _term([[-0.0113] * length], [[0.0] * length], [[1] * length])
        seq = tis(inp, C=1e6, level="sequence")[0, 0].item()
        geo = tis(inp, C=1e6, level="geometric")[0, 0].item()
        assert seq == pytest.approx(product, rel=1e-5) and geo == pytest.approx(0.9887636, rel=1e-5)
        assert mis(inp, c_high=1e6, level="geometric")[0, 0].item() == pytest.approx(geo, rel=1e-6)


# ---------------------------------------------------------------- gspo's advantage convention
def test_gspo_token_advantage_is_the_peers_rule_and_differs_under_token_level_advantages():
    """One row, s = 1.01 (above 1 + 4e-4), A = [1, -1, 3] (row mean 1). row_mean: every token clipped
    at 1.0004, loss -1.0004, no gradient; token (verl, TRL): the A = -1 token keeps -s A = 1.01 and its
    gradient, row loss (-1.0004 + 1.01 - 3.0012) / 3 = -0.9972, gradient s / 9 = 0.11222 per token."""
    out = {}
    for mode in ("row_mean", "token"):
        logp = torch.full((1, 3), math.log(1.01), dtype=torch.float64, requires_grad=True)
        res = gspo(
            logp,
            torch.zeros(1, 3, dtype=torch.float64),
            _t([[1.0, -1.0, 3.0]]),
            torch.ones(1, 3, dtype=torch.bool),
            advantage=mode,
        )
        loss = res.loss.mean()
        (g,) = torch.autograd.grad(loss, logp)
        out[mode] = (loss.item(), g[0, 0].item())
    assert out["row_mean"] == pytest.approx((-1.0004, 0.0), abs=1e-12)
    assert out["token"] == pytest.approx((-0.9972, 1.01 / 9), rel=1e-9)
    # a sequence-level advantage (constant along the row): the two rules agree
    logp, old, adv, mask = _random(seed=8)
    a = gspo(logp, old, adv, mask, advantage="token").loss
    torch.testing.assert_close(a, gspo(logp, old, adv, mask).loss, atol=1e-12, rtol=0)


def test_validate_warns_when_gspo_meets_a_token_level_estimator_with_the_default():
    from zoo.checks.variant import check_variant
    from zoo.config.variant import load_variant

    def warnings(clip):
        v = load_variant("gspo")
        v = v.model_copy(
            update={
                "slots": v.slots.model_copy(
                    update={"advantage": {"name": "reinforce"}, "clip": clip, "normalizer": "none"}
                )
            }
        )
        return [w for w in check_variant(v).warnings if "row_mean" in w]

    assert len(warnings({"name": "gspo"})) == 1
    assert warnings({"name": "gspo", "advantage": "token"}) == []


def test_gdpo_sequence_against_token_whitening_measured_difference():
    """docs/reference/components.md "Against the peers": gdpo whitens over completions, verl over tokens. On case
    C16 the per-row advantages differ by at most 0.2708 (the mixed group's best row: 1.825739 against
    1.5549134; the all-alike group: 0 against -0.2221305)."""
    from test_normalize import C16, gdpo_pipeline

    seq, _ = gdpo_pipeline(**C16)
    tok, _ = gdpo_pipeline(**C16, level="token")
    diff = (seq[:, 0] - tok[:, 0]).abs()
    assert diff.max().item() == pytest.approx(1.825739 - 1.5549134, abs=1e-5)
    assert diff[:3].tolist() == pytest.approx([0.2221305] * 3, abs=1e-6)


# ---------------------------------------------------------------- verl's rejection statistics and batch normalisation
def test_rs_divergence_k3_and_seq_max_hand_case():
    from zoo.components.correction.verl import rs_divergence

    # log rho per token: row 0 [0, 1, -1], row 1 [0.5, 0.5, pad]
    inp = _term([[0.0, 1.0, -1.0], [0.5, 0.5, NAN]], [[0.0, 0.0, 0.0], [0.0, 0.0, INF]], [[1, 1, 1], [1, 1, 0]])
    # k3 = e^x - 1 - x: [0, 0.7182818, 0.3678794], [0.1487213, 0.1487213]
    assert rs_divergence(inp, threshold=0.5, statistic="k3").tolist() == [[1, 0, 1], [1, 1, 0]]
    # seq_max_k3 0.72 > 0.5 rejects row 0; seq_sum_k3 0.297 keeps row 1 at 0.3 but not at 0.2
    assert rs_divergence(inp, threshold=0.5, statistic="k3", level="max").tolist() == [[0, 0, 0], [1, 1, 0]]
    assert rs_divergence(inp, threshold=0.3, statistic="k3", level="sum").tolist() == [[0, 0, 0], [1, 1, 0]]
    assert rs_divergence(inp, threshold=0.2, statistic="k3", level="sum").tolist() == [[0, 0, 0], [0, 0, 0]]
    # seq_max_k2: max (x^2 / 2) = 0.5 for row 0, 0.125 for row 1
    assert rs_divergence(inp, threshold=0.4, statistic="k2", level="max").tolist() == [[0, 0, 0], [1, 1, 0]]
    # seq_mean_k3: row 0 mean 0.3620537
    assert rs_divergence(inp, threshold=0.36, statistic="k3", level="mean").tolist() == [[0, 0, 0], [1, 1, 0]]
    with pytest.raises(ComponentError, match="k1 is `rs`"):
        build("correction", {"name": "rs_divergence", "threshold": 1.0, "statistic": "k1"})


def test_tis_normalized_averages_one_over_the_step():
    from zoo.components.correction.verl import tis_normalized

    old = [[math.log(0.5), 0.0, math.log(4.0)], [math.log(2.0), math.log(1.5), 0.0]]
    roll = [[0.0, 0.0, 0.0], [0.0, 0.0, NAN]]
    mask = [[1, 1, 1], [1, 1, 0]]
    whole = _term(old, roll, mask)
    fields = {"mask": whole.mask, "logp_old": whole.logp_old, "logp_rollout": whole.logp_rollout}
    inp = _term(old, roll, mask, step=StepView(fields, torch.tensor([0, 1])))
    # tis C 2: [0.5, 1, 2], [2, 1.5]; token mean 7 / 5 = 1.4
    torch.testing.assert_close(tis_normalized(inp).double(), _t([[0.5, 1, 2], [2, 1.5, 0]]) / 1.4, rtol=1e-6, atol=0)
    # sequence: products 2 -> 2 and 3 -> 2 (C 2): both 2, mean 2 -> 1 on every real token
    torch.testing.assert_close(tis_normalized(inp, level="sequence"), torch.tensor([[1.0, 1, 1], [1, 1, 0]]))
