"""The MO-GRPO bandit (experiments/mo_grpo_bandit.yaml): the `arms:a,b` model samples only arms and
ends there (not truncated), the rewards' noise pairs arms by (row, completion), and a short version of
the study runs and logs adv/corr with the values the construction predicts at the first step."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from zoo.backends.generate.hf import generate_rollout
from zoo.models.arms import build_arms_model, parse_arms
from zoo.rewards.bandit import arm_bernoulli, arm_gaussian
from zoo.study import experiment, runner
from zoo.tasks import load_task

ROOT = Path(__file__).resolve().parents[2]


def test_arms_model_samples_only_arms_and_they_end_the_completion():
    model, tok = build_arms_model(["a", "b"])
    torch.manual_seed(0)
    b = generate_rollout(
        model, tok, [[{"role": "user", "content": "Pick an arm."}]] * 2, group_size=32, max_new_tokens=1
    )
    assert set(b.texts) == {"a", "b"}  # 64 draws at p = 1/2 each: both appear (P(miss) = 2^-63)
    assert not b.truncated.any() and b.lengths.tolist() == [1] * 64
    ids, mask = tok.apply_chat_template(
        [{"role": "user", "content": "x"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    ).values()
    with torch.no_grad():
        p = model(input_ids=ids).logits[0, -1].softmax(-1)
    arm_ids = tok.convert_tokens_to_ids(["a", "b"])
    assert p[arm_ids].tolist() == [0.5, 0.5]  # zero head weight, zero arm bias: exactly even at the start
    assert float(p.sum() - p[arm_ids].sum()) == 0.0  # special tokens: logit -1e4, probability 0 in fp32
    with pytest.raises(ValueError, match="arms:a,b"):
        parse_arms("arms:a")


def test_bandit_rewards_pair_arms_by_row_and_completion():
    rows = load_task({"name": "bandit", "size": 3}).train
    group = [rows[1]] * 4  # one group of 4 completions of row 1
    r1a = arm_bernoulli(["a"] * 4, group, p={"a": 0.9, "b": 0.1})
    r1b = arm_bernoulli(["b"] * 4, group, p={"a": 0.9, "b": 0.1})
    u = [np.random.default_rng([rows[1]["noise_seed"], j, 0]).random() for j in range(4)]
    assert r1a == [float(x < 0.9) for x in u] and r1b == [float(x < 0.1) for x in u]  # the same u_j for both arms
    z = [np.random.default_rng([rows[1]["noise_seed"], j, 1]).standard_normal() for j in range(4)]
    r2 = arm_gaussian(["a", "b", "b", "c"], group, mean={"a": 0.0, "b": 5.0}, std=10.0, scale=10.0)
    assert r2[:3] == pytest.approx([z[0], (5 + 10 * z[1]) / 10, (5 + 10 * z[2]) / 10]) and r2[3] is None
    assert arm_bernoulli(["", "ba"], group[:2], p={"a": 1.0, "b": 0.0}, missing=0.0) == [
        0.0,
        0.0,
    ]  # no arm; first char b
    # another row gives other noise (rows differ only by noise_seed)
    assert arm_gaussian(["a"], [rows[2]], mean={"a": 0.0}) != arm_gaussian(["a"], [rows[1]], mean={"a": 0.0})


@pytest.mark.e2e
def test_short_bandit_study_logs_adv_corr_as_the_construction_predicts(tmp_path, monkeypatch):
    """At the first step both arms are at p = 1/2. Per objective (Bernoulli R1: sd 0.5, Gaussian R2:
    sd sqrt(0.25 * 5^2 + 10^2) = 10.31, cov(R1, R2) = 0.25 * 0.8 * -5 = -1):
    grpo A ~ R1 + R2: corr(A, R2) = (106.25 - 1) / (10.31 * sqrt(0.25 + 106.25 - 2)) = 0.9996;
    mo_grpo A = z1 + z2, rho = -1 / (0.5 * 10.31) = -0.19: corr(A, R_k) = sqrt((1 + rho) / 2) = 0.64 each.
    One step's 64 completions in 4 groups of 16 leave grpo's R1 correlation noisy (seen: -0.46), so
    the test asks only that R2 drives grpo (corr > 0.95, R1's far below) and that mo_grpo's are even."""
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))
    st = experiment.load_study(
        ROOT / "experiments" / "mo_grpo_bandit.yaml",
        overrides={
            "budget.steps": 2,
            "seeds": [0, 1],
            "variants": ["grpo", "mo_grpo"],
            "ablations": {},
            "output_dir": str(tmp_path / "bandit"),
        },
    )
    assert runner.run_study(st, console=Console(file=open(os.devnull, "w"))) == 0
    for seed in (0, 1):
        first = {}
        for arm in ("grpo", "mo_grpo"):
            recs = [
                json.loads(x)
                for x in (tmp_path / "bandit" / f"{arm}-s{seed}" / "metrics.jsonl").read_text().splitlines()
            ]
            steps = [r for r in recs if "adv/corr/arm_gaussian" in r]
            assert [r["step"] for r in steps] == [1, 2] and all(r["completion/truncated_frac"] == 0 for r in steps)
            first[arm] = steps[0]
        g, m = first["grpo"], first["mo_grpo"]
        assert g["adv/corr/arm_gaussian"] > 0.95 and g["adv/corr/arm_bernoulli"] < g["adv/corr/arm_gaussian"] - 0.4
        for k in ("arm_bernoulli", "arm_gaussian"):
            assert 0.35 < m[f"adv/corr/{k}"] < 0.9
        assert abs(m["adv/corr/arm_bernoulli"] - m["adv/corr/arm_gaussian"]) < 0.3  # even, unlike grpo's
        # the arms saw the same noise: at step 1 both policies are the same, so the same completions and rewards
        assert first["grpo"]["reward/arm_gaussian"] == first["mo_grpo"]["reward/arm_gaussian"]
        assert not math.isnan(first["grpo"]["reward/arm_bernoulli"])


def test_the_rambling_form_ends_on_a_sampled_eos():
    model, tok = build_arms_model(["a", "b"], eos=True)
    torch.manual_seed(0)
    b = generate_rollout(model, tok, [[{"role": "user", "content": "Pick an arm."}]], group_size=64, max_new_tokens=8)
    assert all(set(t) <= {"a", "b"} for t in b.texts)  # EOS is not text; only arms are
    # each token is a, b or EOS with p = 1/3: P(no EOS in 8) = (2/3)^8 = 0.039, so ~2.5 of 64 truncated
    assert 0 < int(b.truncated.sum()) < 12 and len(set(b.lengths.tolist())) > 3
    assert [len(t) for t in b.texts] == [n if tr else n - 1 for n, tr in zip(b.lengths.tolist(), b.truncated.tolist())]


def test_bandit_study_arms_carry_their_own_rewards():
    st = experiment.load_study(ROOT / "experiments" / "mo_grpo_bandit.yaml")
    arms = {a.label: a for a in experiment.expand_arms(st)}
    assert len(arms) == 20
    r2 = {k: arms[f"{k}-s0"].config.rewards[1] for k in ("grpo", "grpo-r2x0.1", "mo_grpo-r2div10")}
    assert "weight" not in r2["grpo"] and r2["grpo-r2x0.1"]["weight"] == 0.1 and r2["mo_grpo-r2div10"]["scale"] == 10.0
    assert "rewards" not in arms["grpo-r2x0.1-s0"].overrides  # a run key, not a variant override
    assert arms["mo_grpo-r2div10-s3"].config.variant == "mo_grpo" and arms["mo_grpo-r2div10-s3"].seed == 3


def test_bandit_task_errors_name_the_key():
    from zoo.tasks import TaskError

    with pytest.raises(TaskError, match="unknown key 'sise'.*did you mean 'size'"):
        load_task({"name": "bandit", "sise": 3})
    with pytest.raises(TaskError, match="'prompt' must be a non-empty string"):
        load_task({"name": "bandit", "prompt": " "})
