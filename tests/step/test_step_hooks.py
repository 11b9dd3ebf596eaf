"""The step's hooks (zoo/step/hooks.py): `pipeline.step` opens its phases in order, one forward
context per model forward (the critic's share nested in train), and a hook that only watches
changes no number and no weight."""

from __future__ import annotations

import contextlib
import math

import torch
from conftest import tiny_run_config

from zoo.step import pipeline
from zoo.step.hooks import NO_HOOKS, Hooks, Phase


class Recorder(Hooks):
    """Writes "<name" / "name>" where a phase opens / closes and "role:rows" per forward."""

    def __init__(self):
        self.events: list[str] = []
        self.batches: list[tuple[str, int | None]] = []  # (phase, rows of the batch it put on its record)

    @contextlib.contextmanager
    def phase(self, name):
        self.events.append(f"<{name}")
        ph = Phase(name)
        yield ph
        self.events.append(f"{name}>")
        self.batches.append((name, None if ph.batch is None else ph.batch.size))

    @contextlib.contextmanager
    def forward(self, role, mb):
        self.events.append(f"{role}:{mb.size}")
        yield


def _ppo(tiny_model_dir, tmp_path):
    from zoo.run import trainer

    # 2 prompts x 4 = 8 rows in micro-batches of 4; 2 epochs x 1 minibatch; KL in the reward (old + reference)
    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        variant="ppo",
        budget={"updates": {"epochs": 2, "minibatches": 1}},
        eval={"enabled": False},
    )
    return trainer.setup(cfg)


def test_ppo_step_opens_every_phase_and_forward_in_order(tiny_model_dir, tmp_path):
    rec = Recorder()
    pipeline.step(_ppo(tiny_model_dir, tmp_path), hooks=rec)
    rollout = ["policy:4", "reference:4", "critic:4"] * 2  # per micro-batch: old, reference, values
    train_mb = ["policy:4", "<critic", "critic:4", "critic>"]  # per micro-batch of an optimizer step
    assert rec.events == (
        [
            "<generate",
            "generate>",
            "<score",
            "score>",
            "<forward",
            *rollout,
            "forward>",
            "<advantage",
            "advantage>",
            "<train",
            *(train_mb * 2 * 2),
            "train>",
        ]
    )
    assert rec.batches == (
        [("generate", 8), ("score", 8), ("forward", None), ("advantage", 8)]
        + [("critic", None)] * 4
        + [("train", None)]
    )


def test_dapo_opens_generate_and_score_once_per_resampling_round(tiny_model_dir, tmp_path):
    from zoo.run import trainer

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        variant="dapo",
        eval={"enabled": False},
        budget={"max_resample_rounds": 2, "updates": {"epochs": 1, "minibatches": 2}},
    )
    rec = Recorder()
    m = pipeline.step(trainer.setup(cfg), hooks=rec).metrics
    # the random model solves no group: dynamic sampling drops them all, refilling up to 1 + 2 rounds
    assert m["groups/rounds"] == 3.0 and m["groups/kept_frac"] == 0.0
    # an empty batch: no rollout forwards and no advantage, the update stage still runs (and skips)
    assert rec.events == ["<generate", "generate>", "<score", "score>"] * 3 + ["<train", "train>"]


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def test_the_bench_probe_changes_no_number_and_no_weight(tiny_model_dir, tmp_path):
    """The same PPO step with no hooks and with the bench's probe (memory resets, position pre-hooks):
    equal metrics (but timings and memory) and equal weights of policy and critic."""
    from zoo.bench.probe import attach

    plain = _ppo(tiny_model_dir, tmp_path / "plain")
    r_plain = pipeline.step(plain, hooks=NO_HOOKS)
    m_plain = r_plain.metrics
    probed = _ppo(tiny_model_dir, tmp_path / "probed")
    with attach(probed) as probe:
        r_probed = pipeline.step(probed, hooks=probe)
    m_probed = r_probed.metrics
    # the phases, `decode` and `work` (not phases: the decode steps generation ran, every forward's work,
    # zoo/bench/probe.py)
    assert set(probe.pop()) == {"generate", "score", "forward", "advantage", "train", "critic", "decode", "work"}
    keys = [k for k in m_plain if not k.startswith(("time/", "perf/"))]
    assert set(keys) == {k for k in m_probed if not k.startswith(("time/", "perf/"))}
    assert "loss/value" in keys and m_plain["optim/updates"] == 2.0  # the critic trained, 2 optimizer steps applied
    diff = {k: (m_plain[k], m_probed[k]) for k in keys if not _same(m_plain[k], m_probed[k])}
    assert not diff
    assert r_plain.samples == r_probed.samples and r_plain.samples
    assert torch.equal(r_plain.batch.advantages, r_probed.batch.advantages)
    for a, b in ((plain.models.policy, probed.models.policy), (plain.models.critic, probed.models.critic)):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), n
    assert not probed.models.policy._forward_pre_hooks  # attach removed its pre-hooks
