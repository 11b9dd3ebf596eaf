"""zoo.core.guards and the non-finite guard in zoo.step.update: a non-finite optimizer step is skipped
(weights and optimizer state unchanged), streaks of unscored or skipped steps stop the run, a run
without any update fails, non-finite weights are never checkpointed."""

import copy
import math
from dataclasses import replace

import pytest
import torch
from test_engine import make_batch, params, reference_loss, settings, slots_for

from zoo.config.run import Guards, RunConfig
from zoo.config.variant import load_variant
from zoo.core import guards
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.types import Models, Slots
from zoo.step.update import update

NAN, INF = float("nan"), float("inf")


def grpo_slots() -> Slots:
    return Slots.of(load_variant("grpo", {"kl": "none"}))


def nan_first_call(clip):
    """The clip rule, but its loss is NaN on the first call (the first optimizer step)."""
    calls = [0]

    def rule(logp, old, adv, mask):
        calls[0] += 1
        res = clip(logp, old, adv, mask)
        return replace(res, loss=res.loss * NAN) if calls[0] == 1 else res

    return rule


def adamw_update(model, tok, batch, slots, s):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    out = update(batch, Models(policy=model, tokenizer=tok, reference=None), slots, s, opt, sched)
    return out, opt, sched


def test_a_nan_loss_skips_that_optimizer_step_only():
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    slots = grpo_slots()
    clean = copy.deepcopy(model)

    # two optimizer steps (epochs 2); the first one's loss is NaN
    out, opt, sched = adamw_update(
        model, tok, batch, replace(slots, clip=nan_first_call(slots.clip)), settings(micro_batch=2, epochs=2)
    )
    assert out["optim/skipped"] == 1.0 and out["optim/updates"] == 1.0 and out["optim/steps"] == 2.0
    assert math.isnan(out["loss/policy"])  # the mean over both steps shows the non-finite one
    assert sched.last_epoch == 2  # the skipped step still used its slot of the schedule
    assert all(p.grad is None for p in model.parameters())
    # the skipped step left weights and AdamW state untouched: the result is one clean AdamW step
    _, ref_opt, _ = adamw_update(clean, tok, batch, slots, settings(micro_batch=2, epochs=1))
    for (k, a), b in zip(model.named_parameters(), clean.parameters()):
        torch.testing.assert_close(a, b, msg=k)
    assert [s["step"] for s in opt.state.values()] == [s["step"] for s in ref_opt.state.values()]
    assert all(float(s["step"]) == 1.0 for s in opt.state.values())


def test_every_step_skipped_leaves_the_model_and_optimizer_untouched():
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    start = params(model)
    slots = grpo_slots()
    always_nan = lambda logp, old, adv, mask: replace(slots.clip(logp, old, adv, mask), loss=logp * NAN)  # noqa: E731
    out, opt, _ = adamw_update(
        model, tok, batch, replace(slots, clip=always_nan), settings(micro_batch=2, minibatches=2)
    )
    assert out["optim/skipped"] == 2.0 and out["optim/updates"] == 0.0
    assert opt.state == {} or all(len(v) == 0 for v in opt.state.values())
    assert all(torch.equal(p, start[k]) for k, p in model.named_parameters())
    assert guards.first_nonfinite(out) == ["loss/policy", "optim/grad_norm"]
    assert guards.no_update_reason(out) == "every optimizer step was skipped: loss/policy is not finite"


def test_an_infinite_gradient_with_a_finite_loss_is_skipped_and_named():
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    start = params(model)
    model.model.norm.weight.register_hook(lambda g: g * INF)
    out, _, _ = adamw_update(model, tok, batch, grpo_slots(), settings(micro_batch=5))
    assert math.isfinite(out["loss/policy"]) and not math.isfinite(out["optim/grad_norm"])
    assert out["optim/skipped"] == 1.0 and guards.first_nonfinite(out) == ["optim/grad_norm"]
    assert all(torch.equal(p, start[k]) for k, p in model.named_parameters())


def test_finite_steps_match_clip_grad_norm():
    """The split norm-then-clip gives what torch's clip_grad_norm_ gives (same weights, same norm)."""
    model, tok = tiny_model_and_tokenizer(seed=3)
    batch = make_batch(tok)
    ref = copy.deepcopy(model)
    s = replace(settings(micro_batch=5), max_grad_norm=0.01)
    out, _, _ = adamw_update(model, tok, batch, slots_for("token_mean"), s)
    assert out["optim/skipped"] == 0.0 and out["optim/updates"] == 1.0

    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    reference_loss(ref, batch, "token_mean").backward()
    norm = torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.01)
    opt.step()
    assert out["optim/grad_norm"] == pytest.approx(float(norm), rel=1e-5) and float(norm) > 0.01  # it did clip
    for (k, a), b in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=k)


# ---------------------------------------------------------------- streaks and the end of a run
G = Guards()


def test_unscored_streak_stops_at_the_third_consecutive_step():
    st = guards.GuardState()
    ok = {"optim/updates": 1.0}
    for frac in (0.6, 0.6, 0.5, 0.75, 1.0):  # 0.5 is not more than the limit: the streak restarts
        guards.after_step(st, G, 1, {**ok, "reward/unscored_frac": frac})
    assert st.unscored_steps == 2
    with pytest.raises(guards.RunFailed) as e:
        guards.after_step(st, G, 6, {**ok, "reward/unscored_frac": 0.625})
    msg = str(e.value)
    assert "step 6" in msg and "62%" in msg and "3 consecutive steps" in msg and "guards.max_unscored_frac = 0.5" in msg
    # a looser limit lets the same steps through
    loose = guards.GuardState()
    for _ in range(5):
        guards.after_step(loose, Guards(max_unscored_frac=1.0), 1, {**ok, "reward/unscored_frac": 1.0})


def test_skipped_streak_names_the_first_non_finite_quantity(caplog):
    st = guards.GuardState()
    skipped = {"optim/updates": 0.0, "optim/skipped": 2.0, "loss/policy": 0.1, "loss/kl": NAN, "optim/grad_norm": INF}
    guards.after_step(st, G, 1, skipped)
    guards.after_step(st, G, 2, skipped)
    guards.after_step(st, G, 3, {"optim/updates": 0.0, "train/skipped": 1.0})  # filtered out: not a skip streak
    assert st.skipped_steps == 0 and "every group was filtered out" in caplog.text
    guards.after_step(st, G, 4, skipped)
    guards.after_step(st, G, 5, skipped)
    with pytest.raises(
        guards.RunFailed,
        match=r"step 6: every optimizer step was skipped for 3 consecutive steps .* "
        r"because loss/kl = nan, optim/grad_norm = inf is not finite",
    ):
        guards.after_step(st, G, 6, skipped)
    assert st.updates == 0


def test_a_run_without_any_update_fails_at_the_end_saying_why():
    st = guards.GuardState()
    guards.after_step(st, G, 1, {"optim/updates": 0.0, "train/skipped": 1.0})
    guards.after_step(st, G, 2, {"optim/updates": 0.0})  # every row's loss mask cleared
    with pytest.raises(guards.RunFailed) as e:
        guards.at_end(st, 2)
    msg = str(e.value)
    assert msg.startswith("no optimizer step trained the policy in 2 steps")
    assert "every group was filtered out by the sampling filter (1 of 2 steps)" in msg
    assert "no completion token was left to train on" in msg
    guards.after_step(st, G, 3, {"optim/updates": 2.0})
    guards.at_end(st, 3)  # one step updated: finished
    assert st.updates == 2


def test_guard_state_survives_a_checkpoint_and_an_old_checkpoint_is_unknown():
    st = guards.GuardState(unscored_steps=2, skipped_steps=1, updates=5, no_update={"x": 1})
    again = guards.GuardState()
    again.load_state_dict(st.state_dict())
    assert again == st
    old = guards.GuardState()
    old.load_state_dict(None)
    assert old.updates is None
    guards.at_end(old, 4)  # unknown count: nothing to decide


def test_non_finite_weights_are_refused_naming_the_parameter():
    model, tok = tiny_model_and_tokenizer(seed=0)
    models = Models(policy=model, tokenizer=tok, reference=None)
    guards.check_finite_weights(models, 1, None)
    with torch.no_grad():
        model.lm_head.weight[3, 2] = NAN
    with pytest.raises(
        guards.RunFailed,
        match=r"step 4: policy parameter 'lm_head.weight' is not finite .* refusing "
        r"to checkpoint .* \(the last checkpoint \(step 3\) is kept\)",
    ):
        guards.check_finite_weights(models, 4, 3)
    model.lm_head.weight.requires_grad_(False)  # frozen weights never change: not checked
    guards.check_finite_weights(models, 4, 3)


def test_guards_config_bounds():
    assert RunConfig().guards == Guards(max_unscored_frac=0.5, unscored_steps=3, max_skipped_steps=3)
    for bad in (
        {"max_unscored_frac": 1.5},
        {"max_unscored_frac": NAN},
        {"unscored_steps": 0},
        {"max_skipped_steps": 0},
        {"max_skiped_steps": 2},
    ):
        with pytest.raises(ValueError):
            RunConfig.model_validate({"guards": bad})


# ---------------------------------------------------------------- data parallel: one decision for all ranks
@pytest.mark.dist
def test_two_ranks_skip_together_when_only_one_has_a_nan_loss(tmp_path):
    import json
    import subprocess

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from conftest import TESTS, launch_two_ranks

    try:
        proc = launch_two_ranks(TESTS / "distributed" / "guards_dist_worker.py", str(tmp_path), timeout=180)
    except subprocess.TimeoutExpired:
        pytest.skip("two gloo processes did not finish in time on this machine")
    if proc.returncode != 0 and not (tmp_path / "guards_rank0.json").exists() and "rendezvous" in proc.stderr:
        pytest.skip(f"gloo could not start here:\n{proc.stderr[-2000:]}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    reports = [json.loads((tmp_path / f"guards_rank{r}.json").read_text()) for r in range(2)]
    for r in reports:  # rank 0's own loss was finite: it skipped too, and neither rank moved
        assert r == {"skipped": 1.0, "updates": 0.0, "moved": 0.0, "grads_left": False}


def test_a_run_whose_correction_masked_every_token_fails_at_the_end():
    """rs/mis bounds too tight for the sampler: optimizer steps ran (optim/updates 1) on a zero loss,
    rollout/masked_frac 1.0. Nothing trained: the run fails at the end, naming the correction."""
    st = guards.GuardState()
    for step in (1, 2):
        guards.after_step(st, G, step, {"optim/updates": 1.0, "rollout/masked_frac": 1.0, "optim/grad_norm": 0.0})
    assert st.updates == 0
    with pytest.raises(guards.RunFailed, match=r"the rollout correction masked every token .* \(2 of 2 steps\)"):
        guards.at_end(st, 2)
    guards.after_step(st, G, 3, {"optim/updates": 1.0, "rollout/masked_frac": 0.4})
    guards.at_end(st, 3)  # a step that kept some tokens trained
    assert st.updates == 1
