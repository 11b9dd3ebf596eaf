"""The two mechanisms that read the sampler's log-probs: the `dppo` clip rule
(zoo/components/clip/divergence.py) and the `off_policy_sequence_mask` correction
(zoo/components/correction/offpolicy.py), on hand-worked cases, against verl / TRL when those are
importable (PYTHONPATH=/work/peers), and through the trainer with the `noisy` generator."""

import math

import pytest
import torch

from zoo import StepCounts, TermInputs
from zoo.config.variant import load_variant
from zoo.core import registry

NAN, INF = float("nan"), float("inf")
ln = math.log

# ---------------------------------------------------------------- dppo: the [2, 3] case
# Row 0, A = +1, three real tokens: mu (sampler) = [0.5, 0.5, 0.1], pi = [0.8, 0.6, 0.2].
# Row 1, A = -1, two real tokens:  mu = [0.5, 0.4], pi = [0.2, 0.5]; the padded slot holds NaN (logp,
# logp_old, adv) and inf (logp_rollout).
#   tv, delta 0.15:  d = pi - mu = [+.3, +.1, +.1] | [-.3, +.1]
#                    A > 0 keeps d <= .15 -> [0, 1, 1];  A < 0 keeps d >= -.15 -> [0, 1]
#   kl, delta 0.03:  D = q ln(q/p) + (1-q) ln((1-q)/(1-p)), q = mu, p = pi:
#                    (.5,.8) .5 ln(.625) + .5 ln(2.5) = .2231 > .03, p > q, A > 0 -> dropped
#                    (.5,.6) .5 ln(.8333) + .5 ln(1.25) = .0204 -> kept
#                    (.1,.2) .1 ln(.5) + .9 ln(1.125) = .0367 > .03, p > q, A > 0 -> dropped (tv kept it)
#                    (.5,.2) .5 ln(2.5) + .5 ln(.625) = .2231 > .03, p < q, A < 0 -> dropped
#                    (.4,.5) .4 ln(.8) + .6 ln(1.2) = .0201 -> kept
#                    -> [0, 1, 0] | [0, 1]
#   w = sg(min(pi / mu, C)) = [1.6, 1.2, 2.0] | [0.4, 1.25]; with C = 1.5: [1.5, 1.2, 1.5] | [0.4, 1.25]
#   loss = -A w ln(pi) keep; d loss / d logp = -A w keep.
MU = [[0.5, 0.5, 0.1], [0.5, 0.4, 1.0]]
PI = [[0.8, 0.6, 0.2], [0.2, 0.5, 1.0]]
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)


def dppo_case(pad=True):
    roll = torch.tensor(MU).log()
    logp = torch.tensor(PI).log()
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
    old = logp.clone()  # the first on-policy update: logp_old = logp
    if pad:
        logp[1, 2], old[1, 2], adv[1, 2], roll[1, 2] = NAN, NAN, NAN, INF
    return logp.requires_grad_(True), old, adv, roll


def run_dppo(spec, case=None, anchor_old=None):
    logp, old, adv, roll = case or dppo_case()
    if anchor_old is not None:
        old = anchor_old
    res = registry.build("clip", spec)(logp, old, adv, MASK, logp_rollout=roll)
    res.loss.sum().backward()
    return res, logp.grad


@pytest.mark.parametrize(
    "spec, keep, w",
    [
        ("dppo", [[0, 1, 1], [0, 1, 0]], [[1.6, 1.2, 2.0], [0.4, 1.25, 0]]),
        ({"name": "dppo", "C": 1.5}, [[0, 1, 1], [0, 1, 0]], [[1.5, 1.2, 1.5], [0.4, 1.25, 0]]),
        (
            {"name": "dppo", "divergence": "kl", "delta_low": 0.03, "delta_high": 0.03},
            [[0, 1, 0], [0, 1, 0]],
            [[1.6, 1.2, 2.0], [0.4, 1.25, 0]],
        ),
    ],
)
def test_dppo_hand_worked(spec, keep, w):
    res, grad = run_dppo(spec)
    keep, w = torch.tensor(keep, dtype=torch.float), torch.tensor(w)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
    logpi = torch.tensor(PI).log()
    torch.testing.assert_close(res.loss, -adv * w * logpi * keep)
    torch.testing.assert_close(grad, -adv * w * keep)
    dropped = (keep == 0) & MASK
    assert torch.equal(res.clip_high, dropped & (adv > 0)) and torch.equal(res.clip_low, dropped & (adv < 0))
    assert torch.isfinite(grad).all() and res.ratio[1, 2] == 1.0  # padding: ratio 1, no gradient


def test_dppo_padding_nan_inf_change_neither_loss_nor_gradient():
    a, ga = run_dppo("dppo", dppo_case(pad=True))
    b, gb = run_dppo("dppo", dppo_case(pad=False))
    assert torch.equal(a.loss, b.loss) and torch.equal(ga, gb)


def test_dppo_row_permutation_permutes_everything_alike():
    logp, old, adv, roll = dppo_case()
    a, ga = run_dppo("dppo", (logp, old, adv, roll))
    p = torch.tensor([1, 0])
    lp2 = logp.detach()[p].clone().requires_grad_(True)
    res = registry.build("clip", "dppo")(lp2, old[p], adv[p], MASK[p], logp_rollout=roll[p])
    res.loss.sum().backward()
    assert torch.equal(res.loss, a.loss[p]) and torch.equal(lp2.grad, ga[p])


def test_dppo_on_policy_without_mismatch_is_the_plain_policy_gradient():
    """logp_rollout == logp_old == logp: every d = 0 (kept), w = 1, so the gradient is -A, PPO's at r = 1;
    and anchor old equals anchor rollout whenever logp_rollout == logp_old."""
    torch.manual_seed(0)
    logp0 = torch.randn(3, 4).clamp(max=-0.05)
    adv = torch.randn(3, 4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    for div in ("tv", "kl"):
        grads = []
        for spec in ({"name": "dppo", "divergence": div}, {"name": "dppo", "divergence": div, "anchor": "old"}, "ppo"):
            lp = logp0.clone().requires_grad_(True)
            kw = {"logp_rollout": logp0} if "dppo" in str(spec) else {}
            res = registry.build("clip", spec)(lp, logp0, adv, mask, **kw)
            res.loss.sum().backward()
            grads.append(lp.grad)
            assert not res.clip_low.any() and not res.clip_high.any()
        torch.testing.assert_close(grads[0], -adv)
        assert torch.equal(grads[0], grads[1])
        torch.testing.assert_close(grads[0], grads[2])


def test_dppo_anchor_rollout_ignores_logp_old_and_anchor_old_ignores_logp_rollout():
    logp, old, adv, roll = dppo_case()
    a, _ = run_dppo("dppo", (logp, old, adv, roll))
    b, _ = run_dppo("dppo", (logp.detach().clone().requires_grad_(True), old - 0.3, adv, roll))
    assert torch.equal(a.loss, b.loss)
    c = registry.build("clip", {"name": "dppo", "anchor": "old"})(logp.detach(), roll, adv, MASK, logp_rollout=None)
    torch.testing.assert_close(c.loss, a.loss)  # old := the sampler's log-probs reproduces anchor rollout


def test_dppo_errors_and_data_is_not_a_hyperparameter():
    logp, old, adv, _ = dppo_case()
    with pytest.raises(ValueError, match="needs the sampler's log-probs"):
        registry.build("clip", "dppo")(logp, old, adv, MASK)
    with pytest.raises(registry.ComponentError, match="unknown parameter 'logp_rollout'"):
        registry.build("clip", {"name": "dppo", "logp_rollout": None})
    for bad, msg in (
        ({"divergence": "js"}, "divergence must be one of tv, kl"),
        ({"anchor": "ref"}, "anchor must be one of rollout, old"),
        ({"delta_low": 0}, "delta_low must be a finite number > 0"),
        ({"C": 0.5}, "C must be a finite number >= 1 or null"),
    ):
        with pytest.raises((ValueError, registry.ComponentError), match=msg):
            registry.build("clip", {"name": "dppo", **bad})
    assert "logp_rollout" not in registry.build("clip", "dppo").resolved()


# ---------------------------------------------------------------- off_policy_sequence_mask: the [3, 3] case
# d = logp_rollout - logp per real token, kl_i = its row mean, delta 0.5:
#   row 0, A = -1: d = [0.2, 0.9, 1.0], kl = 0.7 > 0.5  -> dropped  [0, 0, 0]
#   row 1, A = -1: d = [0.3, 0.5] + a padded slot (logp NaN, rollout inf), kl = 0.4 -> kept [1, 1, 0]
#   row 2, A = +1: d = [1, 1, 1], kl = 1 > 0.5 but A > 0  -> kept  [1, 1, 1]
LOGP = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, NAN], [-0.5, -0.5, -0.5]])
D = torch.tensor([[0.2, 0.9, 1.0], [0.3, 0.5, INF], [1.0, 1.0, 1.0]])
ADV = torch.tensor([[-1.0] * 3, [-1.0, -1.0, NAN], [1.0] * 3])
M3 = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)


def opsm_inputs(logp=LOGP, roll=None, adv=ADV, mask=M3):
    roll = LOGP + D if roll is None else roll
    return TermInputs(
        logp=logp, logp_old=logp, advantages=adv, mask=mask, counts=StepCounts.of(mask), logp_rollout=roll
    )


def test_off_policy_sequence_mask_hand_worked():
    w = registry.build("correction", "off_policy_sequence_mask")(opsm_inputs())
    assert torch.equal(w, torch.tensor([[0.0, 0, 0], [1, 1, 0], [1, 1, 1]]))
    # delta 0.35: row 1's 0.4 now exceeds it too (A < 0) -> dropped; row 2 stays (A > 0)
    w = registry.build("correction", {"name": "off_policy_sequence_mask", "delta": 0.35})(opsm_inputs())
    assert torch.equal(w, torch.tensor([[0.0, 0, 0], [0, 0, 0], [1, 1, 1]]))


def test_off_policy_sequence_mask_nan_on_a_real_token_counts_as_zero():
    # row 0's d = [0.2, NaN, 1.0]: TRL's convention, NaN -> 0 in the mean (0.2 + 0 + 1) / 3 = 0.4 -> kept at 0.5,
    # dropped at 0.35
    roll = LOGP + D
    roll[0, 1] = NAN
    build = lambda d: registry.build("correction", {"name": "off_policy_sequence_mask", "delta": d})  # noqa: E731
    assert torch.equal(build(0.5)(opsm_inputs(roll=roll))[0], torch.ones(3))
    assert torch.equal(build(0.35)(opsm_inputs(roll=roll))[0], torch.zeros(3))


def test_off_policy_sequence_mask_padding_and_permutation_and_on_policy():
    clean_logp, clean_adv, clean_roll = LOGP.clone(), ADV.clone(), LOGP + D
    clean_logp[1, 2], clean_adv[1, 2], clean_roll[1, 2] = 0.0, 0.0, 0.0
    fn = registry.build("correction", "off_policy_sequence_mask")
    w = fn(opsm_inputs())
    assert torch.equal(w, fn(opsm_inputs(logp=clean_logp, roll=clean_roll, adv=clean_adv)))
    p = torch.tensor([2, 0, 1])
    assert torch.equal(fn(opsm_inputs(logp=LOGP[p], roll=(LOGP + D)[p], adv=ADV[p], mask=M3[p])), w[p])
    # no mismatch and no drift (logp_rollout == logp): kl = 0, every real token kept
    assert torch.equal(fn(opsm_inputs(roll=LOGP.clone())), M3.float())


def test_off_policy_sequence_mask_errors():
    with pytest.raises(ValueError, match="needs the sampler's log-probs"):
        registry.build("correction", "off_policy_sequence_mask")(
            TermInputs(logp=LOGP, logp_old=LOGP, advantages=ADV, mask=M3, counts=StepCounts.of(M3))
        )
    with pytest.raises((ValueError, registry.ComponentError), match="delta must be a finite number > 0"):
        registry.build("correction", {"name": "off_policy_sequence_mask", "delta": -1})


# ---------------------------------------------------------------- against the peers (when importable)
class _VerlCfg(dict):
    """What verl's dppo losses read of an ActorConfig: clip_ratio(_low/_high), get('clip_ratio_c'),
    global_batch_info."""

    def __getattr__(self, k):
        return self[k]


@pytest.mark.parametrize("divergence, delta", [("tv", 0.15), ("kl", 0.05)])
def test_dppo_matches_verl(divergence, delta):
    core = pytest.importorskip("verl.trainer.ppo.core_algos")
    fn = core.compute_policy_loss_dppo_tv if divergence == "tv" else core.compute_policy_loss_dppo_kl
    torch.manual_seed(1)
    N, T = 6, 9
    roll = torch.log(torch.rand(N, T) * 0.98 + 0.01)
    logp0 = (roll + 0.6 * torch.randn(N, T)).clamp(max=-1e-3)  # moved policy, some tokens out of the region
    adv = torch.randn(N, 1).expand(N, T).contiguous()
    mask = torch.ones(N, T)
    mask[0, 5:], mask[3, 2:] = 0, 0
    cfg = _VerlCfg(
        clip_ratio=delta, clip_ratio_low=delta, clip_ratio_high=delta, clip_ratio_c=3.0, global_batch_info={}
    )
    # verl anchors at old_log_prob; its recipe's bypass_mode makes that the rollout log-probs
    lp_v = logp0.clone().requires_grad_(True)
    loss_v, _ = fn(roll, lp_v, adv, mask, loss_agg_mode="token-mean", config=cfg)
    loss_v.backward()
    lp_z = logp0.clone().requires_grad_(True)
    res = registry.build(
        "clip", {"name": "dppo", "divergence": divergence, "delta_low": delta, "delta_high": delta, "C": 3.0}
    )(lp_z, logp0, adv, mask.bool(), logp_rollout=roll)
    loss_z = registry.build("aggregate", "token_mean")(res.loss, mask.bool(), StepCounts.of(mask.bool()))
    loss_z.backward()
    diff = max(float((loss_v - loss_z).detach().abs()), float((lp_v.grad - lp_z.grad).abs().max()))
    print(f"dppo_{divergence} vs verl: max |diff| {diff:.3g}")
    assert diff < 1e-6
    assert 0 < float((res.clip_low | res.clip_high).float().sum()) < mask.sum()  # the case masks some, not all


def test_off_policy_sequence_mask_matches_trl():
    trainer = pytest.importorskip("trl.trainer.grpo_trainer")
    torch.manual_seed(2)
    N, T = 8, 7
    logp = -torch.rand(N, T) * 3
    roll = logp + 0.8 * torch.randn(N, T).abs() * torch.randn(N, 1).sign()
    adv = torch.randn(N, 1)
    mask = (torch.rand(N, T) > 0.2).float()
    mask[:, 0] = 1
    want = trainer.GRPOTrainer.get_off_policy_mask(adv, logp, roll, mask, 0.5)  # [N, 1]
    got = registry.build("correction", "off_policy_sequence_mask")(
        opsm_inputs(logp=logp, roll=roll, adv=adv.expand(N, T), mask=mask.bool())
    )
    assert torch.equal(got, want.expand(N, T) * mask)
    assert 0 < float(want.sum()) < N  # some rows dropped, some kept


# ---------------------------------------------------------------- through the trainer, with the noisy sampler
def test_dppo_variant_trains_two_steps_with_the_noisy_sampler_and_validates(tiny_model_dir, tmp_path):
    from conftest import tiny_run_config
    from safetensors.torch import load_file

    from zoo.checks.variant import check_variant
    from zoo.run.trainer import train

    v = load_variant("dppo")
    rep = check_variant(v)
    assert rep.ok and not rep.errors and v.sources.get("clip")
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / "dppo",
        variant="dppo",
        sampling={"backend": {"name": "noisy", "sigma": 1.0}},
        budget={"updates": {"epochs": 1, "minibatches": 2}},
        eval={"enabled": False},
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 2 and math.isfinite(summary["loss/policy"])
    assert summary["rollout/mismatch_kl"] > 1e-2  # the sampler really differs, so the trust region acts on it
    state = torch.load(tmp_path / "dppo" / "checkpoint" / "state.pt", map_location="cpu", weights_only=False)
    before = load_file(str(next(tiny_model_dir.glob("*.safetensors"))))
    shared = [k for k in before if k in state["policy"]]
    assert shared and all(torch.isfinite(state["policy"][k]).all() for k in shared)
    assert max(float((state["policy"][k].float() - before[k].float()).abs().max()) for k in shared) > 1e-6


def test_off_policy_sequence_mask_in_a_run_masks_with_a_small_delta(tiny_model_dir, tmp_path):
    from conftest import tiny_run_config

    from zoo.run.trainer import train

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / "opsm",
        budget={"steps": 1},
        eval={"enabled": False},
        sampling={"backend": {"name": "noisy", "sigma": 1.0}},
        set={"correction": [{"name": "off_policy_sequence_mask", "delta": 1e-3}]},
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and math.isfinite(summary["loss/policy"])
    # N(0, 1) logit noise: most rows' mean (logp_rollout - logp) is far from 0; rows with A < 0 above 1e-3 go
    assert 0 < summary["rollout/masked_frac"] < 1
