"""`critic: {name: clipped_value, init: reward_model}`: the value model starts from the reward model's
backbone and head (InstructGPT arXiv 2203.02155 §3.5); `zoo validate` checks the tokenizers agree."""

import pytest
import torch

from tests.conftest import tiny_run_config
from zoo.checks.inputs import critic_init_errors
from zoo.config.run import effective_variant
from zoo.config.variant import VariantError
from zoo.models.tiny import tiny_reward_model_and_tokenizer


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    model, tok = tiny_reward_model_and_tokenizer(seed=3, hidden=32, layers=1)  # another shape than the policy
    path = tmp_path_factory.mktemp("tiny-rm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _cfg(model_dir, out, rm_dir, **over):
    return tiny_run_config(
        model_dir,
        out,
        variant="ppo",
        set={"critic.init": "reward_model"},
        rewards=[{"name": "reward_model", "model": str(rm_dir)}, "correctness"],
        budget={"steps": 1, "group_size": 2},
        **over,
    )


def test_the_critic_starts_with_the_reward_models_weights(tiny_model_dir, rm_dir, tmp_path):
    from zoo.run.trainer import setup

    st = setup(_cfg(tiny_model_dir, tmp_path, rm_dir))
    rm, _ = tiny_reward_model_and_tokenizer(seed=3, hidden=32, layers=1)
    critic = st.models.critic
    want = rm.model.state_dict()
    got = critic.backbone.state_dict()
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert torch.equal(critic.head.weight, rm.score.weight)  # the RM's head, not a zero one
    assert float(critic.head.weight.detach().abs().sum()) > 0
    assert torch.equal(critic.head.bias, torch.zeros(1))  # the Llama score head has no bias
    # V at the last token of a text = the RM's score of it (same backbone, same head)
    ids = torch.tensor([[3, 10, 11, 12, 13]])  # not ending in eos: transformers would read eos as padding
    with torch.no_grad():
        v = critic(ids, torch.ones_like(ids))[0, -1]
        assert float(v) == pytest.approx(float(rm(input_ids=ids).logits[0, 0]), rel=1e-5)
    assert st.rewards[0][0].session.model is not None  # the reward model's session is open for the run


def test_a_run_with_the_critic_from_the_reward_model_trains_one_step(tiny_model_dir, rm_dir, tmp_path):
    from zoo.run.trainer import train

    summary = train(_cfg(tiny_model_dir, tmp_path, rm_dir), progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 1
    assert "reward/reward_model" in summary


def test_init_reward_model_needs_a_reward_model(tiny_model_dir, tmp_path, rm_dir):
    cfg = tiny_run_config(tiny_model_dir, tmp_path, variant="ppo", set={"critic.init": "reward_model"})
    errors = critic_init_errors(cfg, effective_variant(cfg))
    assert len(errors) == 1 and "needs a reward model in rewards:" in errors[0]
    ok = _cfg(tiny_model_dir, tmp_path, rm_dir)
    assert critic_init_errors(ok, effective_variant(ok)) == []


def test_validate_refuses_a_reward_model_with_another_tokenizer(tiny_model_dir, tmp_path):
    model, tok = tiny_reward_model_and_tokenizer(hidden=32, layers=1)
    tok.add_tokens(["<extra>"])  # one more token: ids of the same text may differ
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    cfg = _cfg(tiny_model_dir, tmp_path / "out", tmp_path / "rm")
    errors = critic_init_errors(cfg, effective_variant(cfg))
    assert len(errors) == 1 and "do not share a tokenizer" in errors[0] and "'<extra>'" in errors[0]


def test_an_unknown_init_is_named(tiny_model_dir, tmp_path):
    from zoo.run.trainer import validate_run

    cfg = tiny_run_config(tiny_model_dir, tmp_path, variant="ppo", set={"critic.init": "reference"})
    with pytest.raises(VariantError, match="init must be policy or reward_model, got 'reference'"):
        validate_run(cfg)


def test_a_reward_model_not_built_yet_is_a_warning_not_an_error(tiny_model_dir, tmp_path):
    """A study builds its proxy first (zoo rm train): validate warns about the missing directory and
    leaves the tokenizer comparison for when it exists."""
    from zoo.checks.settings import run_warnings

    cfg = _cfg(tiny_model_dir, tmp_path, tmp_path / "not-built" / "model")
    v = effective_variant(cfg)
    assert critic_init_errors(cfg, v) == []
    warnings = [w for w in run_warnings(cfg, v) if "does not exist yet" in w]
    assert len(warnings) == 1 and "not-built/model" in warnings[0]
