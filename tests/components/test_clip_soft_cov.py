"""The soft and covariance clip rules (sapo, gmpo, two_sided_clip, clip_cov, kl_cov) on hand-worked
cases, their reductions (SAPO at r = 1, GMPO with one token, two_sided_clip == dual_clip, ratio 0),
padding, row order, the selections' independence of the micro-batch split, and their variants."""

import dataclasses
import math

import pytest
import torch
from test_engine import make_batch, settings

from zoo.components.clip.cov import clip_cov, kl_cov, selection_count, token_priorities
from zoo.components.clip.ppo import clip_higher, dual_clip, no_clip, ppo, two_sided_clip
from zoo.components.clip.soft import gmpo, gmpo_ppo_eps, sapo
from zoo.config.variant import load_variant
from zoo.core.registry import ComponentError, build
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.types import Models, Slots
from zoo.step.update import update

NAN, INF = float("nan"), float("inf")
ATOL = 1e-6
NEW = {
    "sapo": sapo,
    "gmpo": gmpo,
    "two_sided_clip": two_sided_clip,
    "clip_cov": lambda *a: clip_cov(*a, ratio=0.3, cov_lb=-1e9, cov_ub=1e9),
    "kl_cov": lambda *a: kl_cov(*a, ratio=0.3),
}


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


def _leaf(x):
    return _t(x).requires_grad_(True)


def _random(n=4, t=5, seed=0):
    """logp (leaf), logp_old, adv (one value per row, as GRPO), mask [n, t] with ragged rows."""
    g = torch.Generator().manual_seed(seed)
    logp = (-2.0 + torch.randn(n, t, generator=g, dtype=torch.float64)).requires_grad_(True)
    old = logp.detach() + 0.4 * torch.randn(n, t, generator=g, dtype=torch.float64)
    adv = torch.randn(n, 1, generator=g, dtype=torch.float64).expand(n, t).clone()
    lengths = torch.tensor([t, 2, t - 1, 1][:n] + [t] * max(0, n - 4))
    mask = torch.arange(t)[None, :] < lengths[:, None]
    return logp, old, adv, mask


def _loss_and_grad(fn, logp, old, adv, mask):
    res = fn(logp, old, adv, mask)
    (g,) = torch.autograd.grad(res.loss.sum(), logp)
    return res, g


# ---------------------------------------------------------------- SAPO (arXiv 2511.20347 eq. 5-6)
def test_sapo_hand_case():
    # loss = -(4/tau) sigmoid(tau (r - 1)) A; d loss / d logp = -4 s (1 - s) r A, s = sigmoid(tau (r - 1))
    # row 0: A = 1 (tau_pos 1), r = 1: loss -(4/1)(1/2) = -2; grad -4 (1/4) 1 = -1 (= PPO's -A r)
    # row 1: A = -1 (tau_neg 2), r = 1.5: loss -(4/2) sigmoid(1) (-1) = 2 * 0.7310586 = 1.4621172;
    #        grad = -4 * 0.7310586 * 0.2689414 * 1.5 * (-1) = 1.1796716 (PPO: -A r = 1.5, SAPO damps it)
    # row 2: padding, NaN everywhere
    logp = _leaf([[0.0], [math.log(1.5)], [NAN]])
    res, g = _loss_and_grad(
        lambda *a: sapo(*a, tau_pos=1.0, tau_neg=2.0),
        logp,
        _t([[0.0], [0.0], [NAN]]),
        _t([[1.0], [-1.0], [INF]]),
        _t([[1.0], [1.0], [0.0]]),
    )
    torch.testing.assert_close(res.loss, _t([[-2.0], [1.4621172], [0.0]]), atol=ATOL, rtol=0)
    torch.testing.assert_close(g, _t([[-1.0], [1.1796716], [0.0]]), atol=ATOL, rtol=0)
    assert not res.clip_low.any() and not res.clip_high.any()


@pytest.mark.parametrize("tau_pos,tau_neg", [(1.0, 1.05), (0.5, 3.0)])
def test_sapo_at_ratio_one_has_ppos_gradient_and_value_minus_two_over_tau_a(tau_pos, tau_neg):
    logp, _, adv, mask = _random()
    old = logp.detach().clone()  # r = 1 on every token
    res, g = _loss_and_grad(lambda *a: sapo(*a, tau_pos=tau_pos, tau_neg=tau_neg), logp, old, adv, mask)
    _, g_ppo = _loss_and_grad(ppo, logp, old, adv, mask)
    torch.testing.assert_close(g, g_ppo, atol=1e-12, rtol=0)
    tau = torch.where(adv > 0, tau_pos, tau_neg)
    torch.testing.assert_close(res.loss, torch.where(mask, -(2.0 / tau) * adv, torch.zeros_like(adv)))


# ---------------------------------------------------------------- GMPO (arXiv 2507.20673)
def test_gmpo_hand_case():
    # eps 0.4 in log space. Row 0, A = +1, log r = [0.5, -0.1]: A > 0 keeps min(l, 0.4) = [0.4, -0.1],
    #   mean 0.15, g = e^0.15 = 1.1618342, loss -1.1618342 on both tokens. The row's loss -A g sits on
    #   each of its 2 tokens, so d(sum of the row's token losses)/d logp_t = 2 * (-A g / 2) = -A g on an
    #   unclipped token: [0 (clipped), -1.1618342]
    # Row 1, A = -1, log r = [-0.5, 0.2], third slot padding (NaN): A < 0 keeps max(l, -0.4) = [-0.4, 0.2],
    #   mean -0.1, g = e^-0.1 = 0.9048374, loss +0.9048374; grads [0 (clipped), +0.9048374, 0]
    logp = _leaf([[0.5, -0.1, 0.0], [-0.5, 0.2, NAN]])
    old = _t([[0.0, 0.0, 0.0], [0.0, 0.0, NAN]])
    adv = _t([[1.0, 1.0, 0.0], [-1.0, -1.0, INF]])
    mask = _t([[1, 1, 0], [1, 1, 0]])
    res, g = _loss_and_grad(gmpo, logp, old, adv, mask)
    torch.testing.assert_close(
        res.loss, _t([[-1.1618342, -1.1618342, 0.0], [0.9048374, 0.9048374, 0.0]]), atol=ATOL, rtol=0
    )
    torch.testing.assert_close(g, _t([[0.0, -1.1618342, 0.0], [0.0, 0.9048374, 0.0]]), atol=ATOL, rtol=0)
    assert res.clip_high.tolist() == [[True, False, False], [False, False, False]]
    assert res.clip_low.tolist() == [[False, False, False], [True, False, False]]


def test_gmpo_with_one_token_is_ppo_with_the_exponentiated_range():
    lo, hi = gmpo_ppo_eps(0.4, 0.4)
    assert (lo, hi) == pytest.approx((0.32968, 0.49182), abs=1e-5)  # 1 - e^-0.4, e^0.4 - 1
    log_r = torch.linspace(-1.0, 1.0, 21, dtype=torch.float64)  # crosses both clip edges
    adv = torch.cat([torch.ones(21), -torch.ones(21)]).double()[:, None] * 0.7
    logp = torch.cat([log_r, log_r])[:, None].clone().requires_grad_(True)
    old, mask = torch.zeros_like(adv), torch.ones_like(adv)
    res, g = _loss_and_grad(gmpo, logp, old, adv, mask)
    ref, g_ref = _loss_and_grad(lambda *a: clip_higher(*a, eps_low=lo, eps_high=hi), logp, old, adv, mask)
    torch.testing.assert_close(res.loss, ref.loss)
    torch.testing.assert_close(g, g_ref)
    assert torch.equal(res.clip_low, ref.clip_low) and torch.equal(res.clip_high, ref.clip_high)
    assert res.clip_low.any() and res.clip_high.any() and (g == 0).any() and (g != 0).any()


# ---------------------------------------------------------------- two_sided_clip (TRL delta) == dual_clip
def test_two_sided_clip_is_trls_formula_and_dual_clip():
    logp, old, _, mask = _random(n=4, t=6, seed=1)
    adv = _t([[0.8], [-1.1], [0.5], [-2.0]]).expand(4, 6)
    logp2 = (logp.detach() + 2.0 * (torch.arange(6) % 2)).requires_grad_(True)  # ratios up to ~e^2.9 > delta
    kw = dict(eps_low=0.2, eps_high=0.28)
    res, g = _loss_and_grad(lambda *a: two_sided_clip(*a, delta=4.0, **kw), logp2, old, adv, mask)
    ref, g_ref = _loss_and_grad(lambda *a: dual_clip(*a, c=4.0, **kw), logp2, old, adv, mask)
    torch.testing.assert_close(res.loss, ref.loss, atol=0, rtol=0)
    torch.testing.assert_close(g, g_ref, atol=0, rtol=0)
    # TRL: coef_1 = clamp(r, max=delta); loss = -min(coef_1 A, clamp(r, 1-eps, 1+eps_high) A)
    r = (logp2 - old).exp()
    trl = torch.where(mask, -torch.minimum(r.clamp(max=4.0) * adv, r.clamp(0.8, 1.28) * adv), 0.0)
    (g_trl,) = torch.autograd.grad(trl.sum(), logp2)
    torch.testing.assert_close(res.loss, trl)
    torch.testing.assert_close(g, g_trl)
    assert ((r > 4.0) & (adv < 0) & mask).any()  # the region where delta acts is exercised


def test_two_sided_clip_rejects_a_delta_where_the_equivalence_breaks():
    with pytest.raises(ComponentError, match=r"two_sided_clip.*delta must be > 1 \+ eps_high = 1.28, got 1.2"):
        build("clip", {"name": "two_sided_clip", "eps_high": 0.28, "delta": 1.2})


# ---------------------------------------------------------------- Clip-Cov (arXiv 2505.22617)
def test_clip_cov_hand_case():
    # logp = [[0, 0, 0], [-2, -2, -2]] (+ a padded NaN column): mean logp -1, centred [[1]*3, [-1]*3].
    # A = [[6, 2, 0], [0, -2, -6]]: mean 0, so cov = [[6, 2, 0], [0, 2, 6]]; in (1, 5): (0,1) and (1,1).
    # (1,1) has log r = -2 - (-1.5) = -0.5, r = 0.6065 < 0.8 with A < 0: already clipped by PPO, so not a
    # candidate. ratio 0.34 of 6 tokens -> floor(2.04) = 2, but one candidate: (0,1) is picked, whatever the seed.
    # Loss: PPO elsewhere: (0,0) -6; (0,2) 0; (1,0) 0; (1,1) max(0.6065*2, 0.8*2) = 1.6; (1,2) 6; (0,1) zeroed.
    # Gradient -A r on unclipped unselected tokens: (0,0) -6, (1,2) 6, others 0.
    logp = _leaf([[0.0, 0.0, 0.0, NAN], [-2.0, -2.0, -2.0, NAN]])
    old = _t([[0.0, 0.0, 0.0, INF], [-2.0, -1.5, -2.0, 0.0]])
    adv = _t([[6.0, 2.0, 0.0, NAN], [0.0, -2.0, -6.0, 0.0]])
    mask = _t([[1, 1, 1, 0], [1, 1, 1, 0]])
    for seed in (0, 1, 2):
        res, g = _loss_and_grad(lambda *a: clip_cov(*a, ratio=0.34, seed=seed), logp, old, adv, mask)  # noqa: B023 (called within this iteration)
        torch.testing.assert_close(res.loss, _t([[-6.0, 0.0, 0.0, 0.0], [0.0, 1.6, 6.0, 0.0]]), atol=ATOL, rtol=0)
        torch.testing.assert_close(g, _t([[-6.0, 0.0, 0.0, 0.0], [0.0, 0.0, 6.0, 0.0]]), atol=ATOL, rtol=0)
    assert res.token_stats["clip/selected_frac"].tolist() == [[0, 1, 0, 0], [0, 0, 0, 0]]  # logged share: 1/6
    # without the selection (ratio 0) token (0,1) keeps its PPO loss -2 and gradient -2
    res, g = _loss_and_grad(lambda *a: clip_cov(*a, ratio=0.0), logp, old, adv, mask)
    assert res.loss[0, 1].item() == pytest.approx(-2.0) and g[0, 1].item() == pytest.approx(-2.0)


def test_selection_count_is_max_one_floor_and_zero_for_ratio_zero():
    assert [selection_count(2e-4, n) for n in (0, 10, 4999, 5000, 12000)] == [0, 1, 1, 1, 2]
    assert selection_count(0.0, 1000) == 0 and selection_count(1.0, 7) == 7


def test_clip_cov_with_ratio_zero_is_ppo():
    logp, old, adv, mask = _random(n=4, t=6, seed=2)
    res, g = _loss_and_grad(lambda *a: clip_cov(*a, ratio=0.0, eps_low=0.2, eps_high=0.28), logp, old, adv, mask)
    ref, g_ref = _loss_and_grad(lambda *a: clip_higher(*a, eps_low=0.2, eps_high=0.28), logp, old, adv, mask)
    torch.testing.assert_close(res.loss, ref.loss, atol=0, rtol=0)
    torch.testing.assert_close(g, g_ref, atol=0, rtol=0)


def test_clip_cov_picks_the_same_tokens_on_every_run_and_the_seed_matters():
    logp, old, adv, mask = _random(n=6, t=8, seed=3)
    kw = dict(ratio=0.2, cov_lb=-1e9, cov_ub=1e9)  # every unclipped token a candidate; floor(0.2 * 34) = 6 picked

    def picked(seed):
        res = clip_cov(logp, old, adv, mask, seed=seed, **kw)
        ref = clip_higher(logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
        return (res.loss == 0) & (ref.loss != 0)

    first = picked(0)
    assert int(first.sum()) == selection_count(0.2, int(mask.sum())) == 6
    assert all(torch.equal(first, picked(0)) for _ in range(3))
    assert any(not torch.equal(first, picked(s)) for s in (1, 2, 3))


# ---------------------------------------------------------------- KL-Cov (arXiv 2505.22617)
def test_kl_cov_hand_case():
    # logp = [0, 0, -2, -2]: centred [1, 1, -1, -1]; A = [3, 0, 0, -2]: mean 0.25, centred
    # [2.75, -0.25, -0.25, -2.25]; cov = [2.75, -0.25, 0.25, 2.25]. log r = [0.1, 0, 0, 0.2] (beta 1).
    # ratio 0.5 -> 2 tokens: 0 and 3 get + |log r|:
    #   loss_0 = -3 e^0.1 + 0.1 = -3.2155128, loss_3 = 2 e^0.2 + 0.2 = 2.6428055, others -A r = 0
    #   grad_0 = -3 e^0.1 + 1 = -2.3155128, grad_3 = 2 e^0.2 + 1 = 3.4428055
    # ratio 0.25 -> max(1, floor(1)) = 1 token (0): loss_3 = 2 e^0.2 = 2.4428055, grad_3 = 2.4428055
    logp = _leaf([[0.0, 0.0, -2.0, -2.0, NAN]])
    old = _t([[-0.1, 0.0, -2.0, -2.2, NAN]])
    adv, mask = _t([[3.0, 0.0, 0.0, -2.0, INF]]), _t([[1, 1, 1, 1, 0]])
    res, g = _loss_and_grad(lambda *a: kl_cov(*a, ratio=0.5, beta=1.0), logp, old, adv, mask)
    torch.testing.assert_close(res.loss, _t([[-3.2155128, 0.0, 0.0, 2.6428055, 0.0]]), atol=ATOL, rtol=0)
    torch.testing.assert_close(g, _t([[-2.3155128, 0.0, 0.0, 3.4428055, 0.0]]), atol=ATOL, rtol=0)
    res, g = _loss_and_grad(lambda *a: kl_cov(*a, ratio=0.25, beta=1.0), logp, old, adv, mask)
    assert res.loss[0, 3].item() == pytest.approx(2.4428055, abs=ATOL)
    assert g[0, 3].item() == pytest.approx(2.4428055, abs=ATOL)


def test_kl_cov_with_ratio_zero_is_the_unclipped_rule():
    logp, old, adv, mask = _random(seed=4)
    res, g = _loss_and_grad(lambda *a: kl_cov(*a, ratio=0.0), logp, old, adv, mask)
    ref, g_ref = _loss_and_grad(no_clip, logp, old, adv, mask)
    torch.testing.assert_close(res.loss, ref.loss, atol=0, rtol=0)
    torch.testing.assert_close(g, g_ref, atol=0, rtol=0)


# ---------------------------------------------------------------- every new rule: padding and row order
@pytest.mark.parametrize("name", sorted(NEW))
def test_nan_and_inf_in_padding_change_neither_loss_nor_gradient(name):
    logp, old, adv, mask = _random(n=4, t=5, seed=5)
    res, g = _loss_and_grad(NEW[name], logp, old, adv, mask)
    pad = ~mask
    bad = lambda x, v: torch.where(pad, torch.full_like(x, v), x.detach())  # noqa: E731
    logp2 = bad(logp, NAN).requires_grad_(True)
    res2, g2 = _loss_and_grad(NEW[name], logp2, bad(old, INF), bad(adv, -INF), mask)
    torch.testing.assert_close(res2.loss, res.loss, atol=0, rtol=0)
    torch.testing.assert_close(g2, g, atol=0, rtol=0)
    assert (g2[pad] == 0).all() and torch.isfinite(res2.loss).all()


@pytest.mark.parametrize("name", sorted(NEW))
def test_permuting_rows_permutes_the_result(name):
    logp, old, adv, mask = _random(n=6, t=5, seed=6)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    res, g = _loss_and_grad(NEW[name], logp, old, adv, mask)
    logp_p = logp.detach()[perm].clone().requires_grad_(True)
    res_p, g_p = _loss_and_grad(NEW[name], logp_p, old[perm], adv[perm], mask[perm])
    torch.testing.assert_close(res_p.loss, res.loss[perm], atol=1e-12, rtol=0)
    torch.testing.assert_close(g_p, g[perm], atol=1e-12, rtol=0)
    assert (g != 0).any()


def test_token_priorities_follow_their_row_and_the_step():
    _, old, adv, mask = _random(n=5, t=4, seed=7)
    f = {"mask": mask, "advantages": adv, "logp_old": old}
    p = token_priorities(f, 0)
    perm = torch.tensor([4, 2, 0, 1, 3])
    assert torch.equal(token_priorities({k: v[perm] for k, v in f.items()}, 0), p[perm])
    assert not torch.equal(token_priorities(f, 1), p)
    fewer = token_priorities({k: v[:4] for k, v in f.items()}, 0)  # another step (other rows): another draw
    assert not torch.equal(fewer, p[:4])
    assert ((p >= 0) & (p < 1)).all()


# ---------------------------------------------------------------- the engine: selections over the whole step
ROWS = [1, 6, 3, 2, 5, 4, 6, 2]
PROMPTS8 = ["1+1", "What is 12 + 30?", "hi", "a much longer prompt", "7 * 6 =", "2+2", "ok", "9-3"]
SELECTING = {
    "clip_cov": {"name": "clip_cov", "ratio": 0.15, "cov_lb": -1.0e9, "cov_ub": 1.0e9},
    "kl_cov": {"name": "kl_cov", "ratio": 0.15, "beta": 1.0},
}


def _step(clip: dict, micro_batch: int) -> dict[str, torch.Tensor]:
    model, tok = tiny_model_and_tokenizer(seed=0)
    batch = make_batch(tok, seed=3, lengths=ROWS, prompts=PROMPTS8)
    g = torch.Generator().manual_seed(11)  # old log-probs != the policy's, so the ratios (and kl_cov's |log r|) act
    batch = dataclasses.replace(
        batch, logp_old=torch.where(batch.loss_mask, -4.0 + torch.randn(batch.loss_mask.shape, generator=g), 0.0)
    )
    slots = Slots.of(load_variant("grpo", {"kl": "none", "aggregate": "token_mean", "clip": clip}))
    update(
        batch,
        Models(policy=model, tokenizer=tok, reference=None),
        slots,
        settings(micro_batch=micro_batch),
        torch.optim.SGD(model.parameters(), lr=1.0),
        None,
    )
    return {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.mark.parametrize("name", sorted(SELECTING))
def test_a_selecting_clip_rule_gives_the_same_update_for_micro_batch_2_and_8(name):
    a, b, again = _step(SELECTING[name], 2), _step(SELECTING[name], 8), _step(SELECTING[name], 2)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5, msg=k)
        assert torch.equal(a[k], again[k]), k  # the same tokens on every run
    # scope micro selects max(1, floor(0.15 n)) tokens within each 2-row micro-batch instead: another update
    c = _step({**SELECTING[name], "scope": "micro"}, 2)
    assert any(not torch.allclose(a[k], c[k], atol=1e-6) for k in a)


def test_the_step_view_is_data_not_a_hyperparameter():
    with pytest.raises(ComponentError, match="unknown parameter 'step'"):
        build("clip", {"name": "clip_cov", "step": None})
    assert "step" not in build("clip", "kl_cov").resolved()


# ---------------------------------------------------------------- the named variants, with updates that move the ratio
@pytest.mark.parametrize("variant", ["sapo", "gmpo", "cispo", "clip_cov", "kl_cov"])
def test_each_variant_trains_two_steps_with_two_minibatches(variant, tiny_model_dir, tmp_path):
    from conftest import tiny_run_config
    from safetensors.torch import load_file

    from zoo.checks.variant import check_variant
    from zoo.run.trainer import train

    v = load_variant(variant)
    assert check_variant(v).ok and v.sources.get("clip"), variant
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / variant,
        variant=variant,
        budget={"updates": {"epochs": 1, "minibatches": 2}},
        eval={"enabled": False},
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert math.isfinite(summary["loss/policy"])
    if variant == "kl_cov":  # 2e-4 of ~30 tokens per optimizer step: max(1, 0) = 1 token per step
        assert 0 < summary["clip/selected_frac"] < 0.2, summary["clip/selected_frac"]
    if variant == "clip_cov":  # at most 1 per step; 0 when no unclipped token has cov in (1, 5)
        assert 0 <= summary["clip/selected_frac"] < 0.2, summary["clip/selected_frac"]
    state = torch.load(tmp_path / variant / "checkpoint" / "state.pt", map_location="cpu", weights_only=False)
    before = load_file(str(next(tiny_model_dir.glob("*.safetensors"))))
    shared = [k for k in before if k in state["policy"]]
    assert shared and all(torch.isfinite(state["policy"][k]).all() for k in shared)
    assert max(float((state["policy"][k].float() - before[k].float()).abs().max()) for k in shared) > 1e-6


def test_validate_says_what_a_single_update_leaves_of_each_rule():
    from zoo.checks.variant import check_variant

    said = {v: " ".join(check_variant(load_variant(v)).warnings) for v in ("sapo", "clip_cov", "kl_cov")}
    assert "clip 'sapo' can have no effect: one on-policy update" in said["sapo"]
    assert "clip 'clip_cov' has only its token selection left" in said["clip_cov"]
    assert "clip 'kl_cov' is plain -A r (its |log r| penalty does nothing)" in said["kl_cov"]
    v = load_variant("kl_cov")
    two = v.model_copy(update={"updates": v.updates.model_copy(update={"minibatches": 2})})  # ratios move: no warning
    assert not any("kl_cov" in w for w in check_variant(two).warnings)
