"""The warnings for a run that learns little or diverges (zoo.core.watch): most groups without a
correctness signal for LOW_SIGNAL_STEPS steps, an entropy rise over its start, a KL jump; each warned
once, saved in checkpoints and recorded in summary.json; on tiny runs the low-signal warning fires for a
constant reward (and for correctness that never varies beside a length reward that does) and not for a
reward that varies in every group. The signal metrics themselves: zoo.step.scoring.signal_metrics."""

import logging
import math
import textwrap

import pytest
import torch
from conftest import tiny_run_config

from zoo.config.run import Guards
from zoo.core import guards, watch
from zoo.run.progress import step_line
from zoo.run.tracking import read_json, read_jsonl
from zoo.run.trainer import train
from zoo.step.scoring import signal_metrics

NAN = float("nan")


def _warnings(caplog, text):
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


# ---------------------------------------------------------------- the metrics
def test_signal_metrics_count_groups_whose_reward_or_correctness_varies():
    """4 groups of 2: correctness (column 0) varies in group 0 only; the length-like column 1 makes
    groups 0-2 vary; group 3 has one scored member (NaN): no correctness signal."""
    gid = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    obj = torch.tensor([[1.0, 0.1], [0.0, 0.1], [0.0, 0.2], [0.0, 0.3], [1.0, 0.5], [1.0, 0.4], [1.0, 0.0], [NAN, 0.0]])
    m = signal_metrics(0.25, obj, gid, accuracy_col=0)
    assert m == {"groups/signal_frac": 0.75, "groups/correct_signal_frac": 0.25}
    assert signal_metrics(1.0, obj, gid, accuracy_col=None) == {"groups/signal_frac": 0.0}
    partial = torch.tensor([[0.5], [0.0], [1.0], [0.5]])  # partial credit is not correct: only group 1 varies
    assert signal_metrics(0.0, partial, torch.tensor([0, 0, 1, 1]), 0)["groups/correct_signal_frac"] == 0.5


# ---------------------------------------------------------------- the warnings, on metrics
def test_low_signal_warns_once_after_three_steps_naming_the_step_the_fraction_and_the_levers(caplog):
    st = watch.WatchState()
    low = {"groups/signal_frac": 1.0, "groups/correct_signal_frac": 0.25}  # the length reward varies
    with caplog.at_level(logging.WARNING, logger="zoo.core.guards"):
        watch.after_step(st, 1, low)
        watch.after_step(st, 2, {**low, "groups/correct_signal_frac": 0.5})  # exactly half: not more than half
        for step in (3, 4, 5, 6, 7):
            watch.after_step(st, step, low)
    (msg,) = _warnings(caplog, "no correctness signal")
    assert msg.startswith("step 5: 75% of the groups carried no correctness signal (groups/correct_signal_frac 0.25)")
    for lever in ("budget.group_size", "task.fewshot", "sampling.temperature"):
        assert lever in msg
    assert st.totals() == {"guards/low_signal_step": 5.0}
    assert watch.LOW_SIGNAL_STEPS == 3


def test_without_a_correctness_reward_the_reward_signal_counts(caplog):
    st = watch.WatchState()
    with caplog.at_level(logging.WARNING, logger="zoo.core.guards"):
        for step in (1, 2, 3):
            watch.after_step(st, step, {"groups/signal_frac": 0.0})
    assert _warnings(caplog, "step 3: 100% of the groups carried no reward signal (groups/signal_frac 0.00)")


def test_entropy_rise_over_its_start_warns_once():
    """Start: the mean of the first 2 steps that trained (a NaN step is skipped). 3x and >= 0.1 nats."""
    st = watch.WatchState()
    for step, ent in enumerate([0.10, NAN, 0.12, 0.3, 0.34, 0.9, 1.2], start=1):
        watch.after_step(st, step, {"entropy": ent})
    assert st.entropy_base == [0.10, 0.12] and st.warned == {"entropy_rise": 5}  # 0.34 > 3 x 0.11
    tiny = watch.WatchState()
    for step, ent in enumerate([0.001, 0.001, 0.01], start=1):  # 10x, but 0.009 nats: noise
        watch.after_step(tiny, step, {"entropy": ent})
    assert tiny.warned == {}


@pytest.mark.parametrize(
    "kls, step",
    [
        ([0.0, 0.01, 0.02, 0.03], None),  # steady growth
        ([0.01, 0.01, 0.01, 0.06], 4),  # 6x its recent mean
        ([0.001, 0.001, 0.001, 0.04], None),  # 40x, but below KL_JUMP_MIN
        ([0.2, 0.6], 2),  # above KL_LIMIT before any history
    ],
)
def test_kl_jump_warns_above_a_multiple_of_its_recent_value_or_a_limit(kls, step, caplog):
    st = watch.WatchState()
    with caplog.at_level(logging.WARNING, logger="zoo.core.guards"):
        for k, kl in enumerate(kls, start=1):
            watch.after_step(st, k, {"kl/ref": kl})
    assert st.warned.get("kl_jump") == step
    if step:
        assert _warnings(caplog, f"step {step}: the KL to the reference jumped")


def test_the_warnings_survive_a_checkpoint_and_reach_the_summary():
    st = guards.GuardState()
    for step in (1, 2, 3):
        guards.after_step(st, Guards(), step, {"optim/updates": 1.0, "groups/signal_frac": 0.0, "entropy": 0.1})
    again = guards.GuardState()
    again.load_state_dict(st.state_dict())
    assert again == st and again.watch.warned == {"low_signal": 3}
    assert again.totals()["guards/low_signal_step"] == 3.0
    old = {k: v for k, v in st.state_dict().items() if k != "watch"}
    again.load_state_dict(old)  # a checkpoint written before the warnings: they start afresh
    assert again.watch == watch.WatchState()


def test_the_step_line_shows_the_signal_and_explains_nan_statistics():
    line = step_line(3, {"reward/total": 0.5, "groups/signal_frac": 0.75, "groups/correct_signal_frac": 0.25})
    assert "groups/signal_frac 0.75  groups/correct_signal_frac 0.25" in line and "nothing trained" not in line
    filtered = {"train/skipped": 1.0, "optim/updates": 0.0, "entropy": NAN, "clip/low_frac": NAN}
    assert step_line(4, filtered).endswith(
        "(nothing trained: every group was filtered out by the sampling filter; entropy, clip/low_frac NaN: "
        "a mean over no token)"
    )


def test_the_step_line_shows_staleness_only_when_the_step_logged_it():
    """An `async:` run's step logs async/staleness_mean|max (zoo.step.pacing.staleness_metrics); the line
    shows them after the other keys. A synchronous step logs none, and the line names none."""
    m = {"reward/total": 0.5, "time/step": 2.0, "async/staleness_mean": 0.75, "async/staleness_max": 2.0}
    assert step_line(5, m) == "step   5 reward/total 0.5  time/step 2  async/staleness_mean 0.75  async/staleness_max 2"
    assert "staleness" not in step_line(5, {"reward/total": 0.5, "time/step": 2.0})


# ---------------------------------------------------------------- on tiny runs
@pytest.fixture
def plain_rewards(tmp_path, monkeypatch):
    (tmp_path / "plain_rewards.py").write_text(
        textwrap.dedent("""
        def constant(completions, rows):
            return [1.0 for _ in completions]

        def alternating(completions, rows):  # 0, 1, 0, 1, ...: every group of an even size varies
            return [float(i % 2) for i in range(len(completions))]
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "plain_rewards"


def _train(model_dir, out, **over):
    cfg = tiny_run_config(model_dir, out / "run", eval={"enabled": False}, budget={"steps": 3}, **over)
    return train(cfg, progress=False), [r for r in read_jsonl(out / "run" / "metrics.jsonl") if "reward/total" in r]


@pytest.mark.e2e
@pytest.mark.parametrize("fn, warned", [("constant", True), ("alternating", False)])
def test_a_constant_reward_warns_and_a_varying_one_does_not(
    fn, warned, plain_rewards, tiny_model_dir, tmp_path, caplog
):
    with caplog.at_level(logging.WARNING, logger="zoo.core.guards"):
        summary, recs = _train(tiny_model_dir, tmp_path, plugins=[plain_rewards], rewards=[f"{plain_rewards}:{fn}"])
    assert [r["groups/signal_frac"] for r in recs] == [0.0 if warned else 1.0] * 3
    assert "groups/correct_signal_frac" not in recs[0]  # no correctness reward
    msgs = _warnings(caplog, "carried no reward signal")
    assert len(msgs) == int(warned), caplog.text
    assert ("guards/low_signal_step" in summary) == warned
    if warned:
        assert msgs[0].startswith("step 3: 100% of the groups")
        assert read_json(tmp_path / "run" / "summary.json")["guards/low_signal_step"] == 3.0


@pytest.mark.e2e
def test_a_length_reward_that_varies_does_not_hide_that_no_answer_is_right(tiny_model_dir, tmp_path, caplog):
    """The tiny random model answers nothing right: correctness is constant in every group while the
    length reward beside it varies, so signal_frac is high and correct_signal_frac 0: the run warns."""
    with caplog.at_level(logging.WARNING, logger="zoo.core.guards"):
        summary, recs = _train(tiny_model_dir, tmp_path)
    assert all(r["accuracy"] == 0.0 and r["groups/correct_signal_frac"] == 0.0 for r in recs)
    assert any(r["groups/signal_frac"] > 0.5 for r in recs)
    assert len(_warnings(caplog, "carried no correctness signal")) == 1
    assert summary["guards/low_signal_step"] == 3.0 and not math.isnan(summary["groups/signal_frac"])
