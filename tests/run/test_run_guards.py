"""Run-time guards on tiny runs: a reward that never scores a row fails the run whatever its length,
a collapsed policy warns, sampling on non-finite probabilities (training or eval) is one line naming
the likely key, skipped optimizer steps are counted and warned, reward scores that would overflow
float32 are refused, and a reward cannot mutate the rows it is given."""

import logging
import math
import textwrap

import pytest
import torch
from conftest import tiny_run_config

from zoo.config.run import Guards
from zoo.core import guards
from zoo.core.guards import RewardError, RunFailed
from zoo.rewards.compute import REWARD_LIMIT, check_weighted, compute_rewards, resolve_rewards
from zoo.run.tracking import read_json, read_jsonl
from zoo.run.trainer import train

G = Guards()
LN_V = math.log(105)  # the tiny model's vocabulary (zoo.models.tiny): the entropy of a uniform policy


@pytest.fixture(autouse=True)
def _no_crash_env(monkeypatch):
    monkeypatch.delenv("ZOO_FAIL_AT_STEP", raising=False)


@pytest.fixture
def odd_rewards(tmp_path, monkeypatch):
    """A plugin module of rewards that break in different ways."""
    (tmp_path / "odd_rewards.py").write_text(
        textwrap.dedent("""
        def all_none(completions, rows):
            return [None] * len(completions)

        def always_raises(completions, rows):
            raise RuntimeError("no scorer available")

        def every_other_step(completions, rows):
            every_other_step.calls = getattr(every_other_step, "calls", 0) + 1
            return [None if every_other_step.calls % 2 else 1.0 for _ in completions]

        def huge(completions, rows):
            return [3e38 for _ in completions]

        def clears_rows(completions, rows):
            out = [float(len(c) > 0) for c in completions]
            for r in rows:
                r.clear()
            completions.clear()
            return out
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "odd_rewards"


def _run(model_dir, out, **over):
    over.setdefault("eval", {"enabled": False})
    return tiny_run_config(model_dir, out, **over)


# ---------------------------------------------------------------- 1. a reward that never scores a row
@pytest.mark.parametrize(
    "fn, steps, alone", [("all_none", 2, False), ("always_raises", 2, False), ("all_none", 1, True)]
)
def test_a_reward_that_never_scores_fails_a_run_shorter_than_the_streak(
    fn, steps, alone, odd_rewards, tiny_model_dir, tmp_path
):
    """2 steps (< guards.unscored_steps = 3) with the length reward scoring beside it (the example);
    1 step with the reward alone (a variation). Both fail instead of `finished` with reward/total NaN."""
    rewards = [f"{odd_rewards}:{fn}"] + ([] if alone else [{"name": "length", "weight": 0.5, "scale": 10.0}])
    cfg = _run(tiny_model_dir, tmp_path, plugins=[odd_rewards], rewards=rewards, budget={"steps": steps})
    with pytest.raises(RunFailed) as e:
        train(cfg, progress=False)
    msg = str(e.value)
    assert msg.startswith(
        f"no completion was scored in the {steps} step(s) of this run: reward '{odd_rewards}:{fn}' scored none"
    ), msg
    assert "\n" not in msg
    summary = read_json(tmp_path / "summary.json")
    assert summary["status"] == "failed" and summary["steps"] == steps
    recs = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "reward/total" in r]
    assert len(recs) == steps and all(math.isnan(r["reward/total"]) for r in recs)


def test_a_reward_that_scores_in_some_steps_finishes(odd_rewards, tiny_model_dir, tmp_path):
    """None in step 1, scores in step 2: some row was scored, the run finishes (guard not tripped)."""
    cfg = _run(tiny_model_dir, tmp_path, plugins=[odd_rewards], rewards=[f"{odd_rewards}:every_other_step"])
    assert train(cfg, progress=False)["status"] == "finished"


def test_the_scored_count_survives_a_checkpoint_and_is_unknown_in_an_older_one():
    st = guards.GuardState()
    guards.after_step(
        st,
        Guards(max_unscored_frac=1.0),
        1,
        {"optim/updates": 1.0, "reward/unscored_frac": 1.0, "reward/a": math.nan, "reward/b": 0.5},
        rewards=["a", "b"],
    )
    assert st.unscored_all_steps == 0 and st.unscored_by == {"a": 1}  # the guard is off (max_unscored_frac 1)
    guards.at_end(st, 1)
    guards.after_step(
        st,
        G,
        2,
        {"optim/updates": 1.0, "reward/unscored_frac": 1.0, "reward/a": math.nan, "reward/b": 0.5},
        rewards=["a", "b"],
    )
    again = guards.GuardState()
    again.load_state_dict(st.state_dict())
    assert again == st and again.unscored_all_steps == 1
    guards.at_end(again, 2)  # step 1 (guard off) did not count: not every step went unscored
    with pytest.raises(RunFailed, match=r"in the 1 step\(s\) of this run: reward 'a' scored none"):
        guards.at_end(again, 1)
    old = {k: v for k, v in st.state_dict().items() if k not in ("unscored_all_steps", "unscored_by")}
    again.load_state_dict(old)  # a checkpoint written before the count existed: nothing to decide
    assert again.unscored_all_steps == 0
    guards.at_end(again, 1)


# ---------------------------------------------------------------- 2. collapse and non-finite sampling
def test_lr_1e6_collapses_the_policy_and_the_run_warns(tiny_model_dir, tmp_path, caplog):
    cfg = _run(tiny_model_dir, tmp_path, optim={"lr": 1e6}, budget={"steps": 3})
    with caplog.at_level(logging.WARNING, logger="zoo.core.guards"):
        summary = train(cfg, progress=False)
    warned = [r.getMessage() for r in caplog.records if "collapsed to the uniform distribution" in r.getMessage()]
    assert len(warned) == 1, caplog.text  # once, at the first collapsed step
    assert warned[0].startswith("step 2:") and "optim.lr = 1e+06 too high?" in warned[0]
    assert summary["guards/collapsed_steps"] == 2.0  # steps 2 and 3 sampled from the uniform policy
    assert summary["entropy"] == pytest.approx(LN_V, rel=1e-5)


def test_collapse_needs_an_update_and_the_maximum_entropy():
    """Variation on the guard itself: a random model near uniform before any update is not a collapse;
    1e-3 below ln |V| is not either; a zero gradient with non-zero advantages warns after 2 steps."""
    st = guards.GuardState()
    guards.after_step(st, G, 1, {"optim/updates": 1.0, "entropy": LN_V}, vocab=105)  # no update before step 1
    assert st.collapsed_steps == 0
    guards.after_step(st, G, 2, {"optim/updates": 1.0, "entropy": LN_V - 1e-3}, vocab=105)
    assert st.collapsed_steps == 0
    guards.after_step(st, G, 3, {"optim/updates": 1.0, "entropy": LN_V * (1 - 1e-6)}, vocab=105)
    assert st.collapsed_steps == 1 and st.totals()["guards/collapsed_steps"] == 1.0
    flat = {"optim/updates": 1.0, "optim/grad_norm": 0.0, "adv/std": 0.7}
    guards.after_step(st, G, 4, flat)
    guards.after_step(st, G, 5, {**flat, "adv/std": 0.0})  # nothing to learn: not the guard's business
    guards.after_step(st, G, 6, flat)
    assert st.no_grad_steps == 1
    guards.after_step(st, G, 7, flat)
    assert st.no_grad_steps == 2


def test_weight_decay_1e9_fails_the_eval_with_one_line_naming_the_key(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path, optim={"lr": 1e-3, "weight_decay": 1e9})
    with pytest.raises(RunFailed) as e:
        train(cfg, progress=False)
    msg = str(e.value)
    assert msg.startswith(
        "eval after training: sampling failed because the policy's next-token probabilities are not finite"
    ), msg
    assert "optim.weight_decay = 1e+09" in msg and "1 - lr x weight_decay = -999999" in msg and "\n" not in msg
    assert read_json(tmp_path / "summary.json")["status"] == "failed"


def test_non_finite_sampling_names_the_temperature_or_the_model():
    """Variation: which key the message names (tiny temperature, no update yet, diverged updates)."""
    from zoo.config.run import RunConfig

    cfg = RunConfig.model_validate({"optim": {"lr": 3e-4}})
    tiny = guards.nonfinite_sampling(
        "step 1", cfg, temperature=1e-300, temperature_key="sampling.temperature", updated=False
    )
    assert str(tiny).startswith("step 1: sampling failed") and "sampling.temperature = 1e-300" in str(tiny)
    fresh = guards.nonfinite_sampling(
        "eval before training", cfg, temperature=1.0, temperature_key="eval.temperature", updated=False
    )
    assert "the model's own weights" in str(fresh)
    diverged = guards.nonfinite_sampling(
        "step 4", cfg, temperature=1.0, temperature_key="sampling.temperature", updated=True
    )
    assert "optim.lr = 0.0003 too high?" in str(diverged) and "weight_decay" not in str(diverged)


# ---------------------------------------------------------------- 3. skipped optimizer steps are counted
def test_kl_cov_beta_1e30_skips_are_counted_and_warned(tiny_model_dir, tmp_path, caplog):
    cfg = _run(
        tiny_model_dir,
        tmp_path,
        variant="kl_cov",
        set={"clip.beta": 1e30},
        budget={"updates": {"epochs": 1, "minibatches": 2}},
    )
    with caplog.at_level(logging.WARNING, logger="zoo.core.guards"):
        summary = train(cfg, progress=False)
    assert summary["status"] == "finished"
    # each step's first minibatch runs on-policy (ratio 1, |log r| 0: finite); the second has a 1e30 term
    assert summary["optim/skipped_total"] == 2.0 and summary["optim/steps_total"] == 4.0
    assert "step 1: 1 of 2 optimizer steps skipped because optim/grad_norm is not finite" in caplog.text
    assert "2 of 4 optimizer steps in this run were skipped" in caplog.text


def test_skip_totals_add_up_over_steps_and_resume():
    st = guards.GuardState()
    guards.after_step(st, G, 1, {"optim/updates": 3.0, "optim/skipped": 1.0, "optim/steps": 4.0, "loss/kl": math.inf})
    guards.after_step(st, G, 2, {"optim/updates": 0.0, "optim/skipped": 4.0, "optim/steps": 4.0, "loss/kl": math.inf})
    guards.after_step(st, G, 3, {"optim/updates": 4.0, "optim/skipped": 0.0, "optim/steps": 4.0})
    again = guards.GuardState()
    again.load_state_dict(st.state_dict())
    assert again.totals() == {"optim/skipped_total": 5.0, "optim/steps_total": 12.0, "guards/collapsed_steps": 0.0}


# ---------------------------------------------------------------- 4. scores that would overflow float32
def test_a_weight_of_1e300_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"rewards: weight 1e\+300 of 'correctness' is too large: at most 1e\+15"):
        resolve_rewards([{"name": "correctness", "weight": 1e300}])
    assert resolve_rewards([{"name": "correctness", "weight": -REWARD_LIMIT}])[0][1] == -1e15  # the bound is allowed


def test_rewards_of_3e38_stop_the_run_naming_the_reward(odd_rewards, tiny_model_dir, tmp_path):
    cfg = _run(tiny_model_dir, tmp_path, plugins=[odd_rewards], rewards=[f"{odd_rewards}:huge"])
    with pytest.raises(RewardError, match=r"reward 'odd_rewards:huge' returned 3e\+38 for row 0; .* at most 1e\+15"):
        train(cfg, progress=False)


def test_weight_times_value_beyond_the_limit_is_refused():
    """Variation: each factor is allowed, their product is not (weight 1e10 x value 1e6 = 1e16)."""
    obj = torch.tensor([[1.0, 0.5], [1e6, math.nan]])  # [N=2, K=2]
    check_weighted(obj, ["a", "b"], [1e9, 2.0])  # 1e15: at the limit
    with pytest.raises(
        RewardError, match=r"reward 'a': weight 1e\+10 x value 1e\+06 \(row 1\) = 1e\+16 exceeds 1e\+15"
    ):
        check_weighted(obj, ["a", "b"], [1e10, 2.0])


def test_reward_means_are_float64():
    from zoo.step.scoring import nanmean

    x = torch.full((8,), 3e38 / 4, dtype=torch.float32)  # a float32 sum of these overflows
    assert nanmean(x) == pytest.approx(7.5e37, rel=1e-6)


# ---------------------------------------------------------------- 5. rewards get copies
def test_a_reward_that_clears_its_rows_changes_nothing(odd_rewards, tiny_model_dir, tmp_path):
    cfg = _run(
        tiny_model_dir,
        tmp_path,
        plugins=[odd_rewards],
        rewards=[f"{odd_rewards}:clears_rows", "correctness"],
        budget={"steps": 1},
    )
    assert train(cfg, progress=False)["status"] == "finished"
    samples = read_jsonl(tmp_path / "samples.jsonl")
    assert samples and all(s["prompt"] for s in samples), samples[:2]


def test_the_next_reward_sees_the_rows_unchanged():
    """Variation: a reward that edits a row's answer and the completion list; the one after it
    scores against the original row."""

    def edits(completions, rows):
        for r in rows:
            r["answer"] = "wrong"
        completions[:] = ["x"] * len(completions)
        return [0.0] * len(rows)

    def matches(completions, rows):
        return [float(c == r["answer"]) for c, r in zip(completions, rows)]

    rows = [{"answer": "7"}, {"answer": "9"}]
    scores = compute_rewards([edits, matches], ["7", "8"], rows)
    assert scores.objectives[:, 1].tolist() == [1.0, 0.0]
    assert rows == [{"answer": "7"}, {"answer": "9"}]
