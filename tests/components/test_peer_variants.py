"""The named variants added with the peers' mechanisms validate and train 2 steps on the tiny model
(two minibatches, so the ratio leaves 1), and `zoo validate` says what each single-update clip keeps."""

import math

import pytest
import torch

from zoo.checks.variant import check_variant
from zoo.config.variant import load_variant

NEW_VARIANTS = ["lite_ppo", "gpg", "grpo_bypass", "reinforce_bypass_icepop", "luspo", "maxrl", "remax", "otb"]


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_each_new_variant_validates_with_sources(variant):
    v = load_variant(variant)
    rep = check_variant(v)
    assert rep.ok, rep.errors
    assert v.sources, variant


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_each_new_variant_trains_two_steps(variant, tiny_model_dir, tmp_path):
    from conftest import tiny_run_config

    from zoo.run.trainer import train

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
    state = torch.load(tmp_path / variant / "checkpoint" / "state.pt", map_location="cpu", weights_only=False)
    assert all(torch.isfinite(t).all() for t in state["policy"].values() if t.is_floating_point())


@pytest.mark.parametrize(
    "correction",
    [
        {"name": "m2po", "tau": 0.04},
        {"name": "tis_normalized", "C": 2.0},
        {"name": "rs_divergence", "threshold": 2.0, "statistic": "k3", "level": "max"},
        {"name": "icepop"},
    ],
)
def test_each_new_correction_trains_two_steps(correction, tiny_model_dir, tmp_path):
    """The step-selecting corrections (m2po, tis_normalized) get the step view in a real update."""
    from conftest import tiny_run_config

    from zoo.run.trainer import train

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / correction["name"],
        variant="grpo",
        budget={"updates": {"epochs": 1, "minibatches": 2}},
        eval={"enabled": False},
        set={"correction": [correction], "kl": "none"},
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 2 and math.isfinite(summary["loss/policy"])


def _advantage_batch(st):
    """Run one step of the run state `st` and return the batch its advantage phase saw."""
    import contextlib

    from zoo.step import pipeline
    from zoo.step.hooks import Hooks, Phase

    seen = {}

    class Watch(Hooks):
        @contextlib.contextmanager
        def phase(self, name):
            ph = Phase(name)
            yield ph
            if name == "advantage":
                seen["batch"] = ph.batch

    pipeline.step(st, hooks=Watch())
    return seen["batch"]


def test_remax_reads_the_score_of_a_greedy_completion_of_each_prompt(tiny_model_dir, tmp_path):
    """The step draws one greedy completion per prompt (zoo/step/greedy.py) and the estimator's
    advantage is score - that completion's score on every real token; the baseline is the same for
    the rows of one prompt and equals the rewards of an argmax decode of the prompt, scored apart."""
    from conftest import tiny_run_config

    from zoo.backends.generate.hf_generator import HFGenerator
    from zoo.core.generator_types import SamplingParams
    from zoo.rewards.compute import compute_rewards
    from zoo.run import trainer

    cfg = tiny_run_config(tiny_model_dir, tmp_path, variant="remax", budget={"group_size": 2}, eval={"enabled": False})
    st = trainer.setup(cfg)
    before = {k: v.clone() for k, v in st.models.policy.state_dict().items()}
    b = _advantage_batch(st)
    st.models.policy.load_state_dict(before)  # the greedy baseline was drawn before the update
    g = b.extras["greedy_score"]
    assert g.shape == (b.size,)
    for gid in b.group_ids.unique():
        assert (g[b.group_ids == gid] == g[b.group_ids == gid][0]).all()
    from dataclasses import replace

    from zoo.step.advantages import advantage

    b = replace(b, kl_reward=torch.zeros(b.loss_mask.shape))  # the phase's batch is from before the kl_reward stage
    adv = advantage(b, st.slots).advantages
    first = b.loss_mask.float().argmax(1)
    torch.testing.assert_close(adv[torch.arange(b.size), first], (b.scores - g).to(adv.dtype))
    # independently: argmax decode of each row's prompt, the run's rewards and weights (no length shaping in remax)
    prompts = [r["prompt"] for r in b.rows]
    out = HFGenerator(st.models.policy, st.models.tokenizer).generate(
        prompts, 1, SamplingParams(max_new_tokens=st.settings.max_new_tokens, do_sample=False)
    )
    obj, _ = compute_rewards([c for c, _ in st.rewards], out.texts, b.rows)
    w = torch.tensor([w for _, w in st.rewards], dtype=obj.dtype)
    torch.testing.assert_close((obj * w).sum(1), g.to(obj.dtype), rtol=1e-5, atol=1e-6)


def test_otb_reads_the_energy_the_old_forward_wrote(tiny_model_dir, tmp_path):
    """A step of `otb`: the advantage stage sees extras["otb_energy"] [N, T] from the old forward (1 - 2 pi_j
    + sum_v pi_v^2: 0 off the loss mask, sum_v pi_v^2 = e - 1 + 2 exp(logp_old) in [1/V, 1] on it)."""
    from conftest import tiny_run_config

    from zoo.run import trainer

    cfg = tiny_run_config(tiny_model_dir, tmp_path, variant="otb", budget={"group_size": 2}, eval={"enabled": False})
    st = trainer.setup(cfg)
    b = _advantage_batch(st)
    e, m = b.extras["otb_energy"], b.loss_mask
    assert e.shape == m.shape and (e[~m] == 0).all() and m.any()
    sum_sq = (e - 1 + 2 * b.logp_old.exp())[m]
    V = st.models.policy.config.vocab_size
    assert (sum_sq >= 1 / V - 1e-6).all() and (sum_sq <= 1 + 1e-6).all()
