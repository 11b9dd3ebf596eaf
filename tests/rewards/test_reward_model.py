"""The `reward_model` reward (zoo.rewards.reward_model) and the stateful-reward contract
(zoo.rewards.session), on a tiny random Llama reward model built in code (zoo.models.tiny)."""

import pytest
import torch

from zoo.core.registry import ComponentError
from zoo.models.tiny import tiny_reward_model_and_tokenizer
from zoo.rewards import compute_rewards, resolve_rewards
from zoo.rewards.reward_model import RewardModelSession, load_reward_model, rm_texts, score_batch
from zoo.rewards.session import LiveReward, close_rewards, open_rewards

ROWS = [
    {"prompt": [{"role": "user", "content": "What is 2+3?"}]},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "7-4?"}]},
    {"prompt": "1+1"},
]
COMPLETIONS = ["It is \\boxed{5}.", "3", "The answer, after a long think about it, is \\boxed{2}"]


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """The tiny reward model (pad = eos, as in SmolLM2) saved as an HF checkpoint."""
    model, tok = tiny_reward_model_and_tokenizer(seed=0)
    path = tmp_path_factory.mktemp("tiny-rm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _session(rm_dir, **kw):
    s = RewardModelSession(model=str(rm_dir), **kw)
    s.setup(torch.device("cpu"))
    return s


def test_scores_are_deterministic_and_batch_size_independent(rm_dir):
    one = _session(rm_dir, batch_size=1)(COMPLETIONS, ROWS)  # each row alone: no padding at all
    three = _session(rm_dir, batch_size=3)(COMPLETIONS, ROWS)  # one padded batch of 3 different lengths
    again = _session(rm_dir, batch_size=3)(COMPLETIONS, ROWS)
    assert three == again
    assert len(set(one)) == 3  # a random model gives three different scores (the comparison can fail)
    assert one == pytest.approx(
        three, rel=1e-5
    )  # scores near 14: 1 float32 ulp there is 1.9e-6, machines differ in the last bits


def test_left_and_right_padding_give_the_same_score(rm_dir):
    rm, tok = load_reward_model(str(rm_dir))
    texts = rm_texts(tok, COMPLETIONS, ROWS)
    tok.padding_side = "left"
    left = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    tok.padding_side = "right"
    right = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert not torch.equal(left["attention_mask"], right["attention_mask"])  # the rows really are padded
    a = score_batch(rm, left["input_ids"], left["attention_mask"])
    b = score_batch(rm, right["input_ids"], right["attention_mask"])
    assert torch.allclose(a, b, atol=1e-5)


def test_a_rows_score_equals_a_hand_call_of_the_model_on_its_text(rm_dir):
    """The hand call: the chat text written out here (ChatML, the tiny tokenizer's template), tokenized
    alone (no padding), through transformers' own forward, whose pooled logit is read at the last
    token: our pooling and text formatting must give the same number."""
    rm, tok = tiny_reward_model_and_tokenizer(seed=0)
    text = "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\nIt is \\boxed{5}.<|im_end|>\n"
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        want = float(rm(input_ids=ids).logits[0, 0])
    got = _session(rm_dir, batch_size=3)(COMPLETIONS, ROWS)[0]  # row 0 scored in a padded batch of 3
    assert got == pytest.approx(want, rel=1e-5)  # padded batch of 3 vs alone; scores near 14


def test_plain_text_without_a_chat_template(rm_dir):
    _, tok = load_reward_model(str(rm_dir))
    tok.chat_template = None
    assert rm_texts(
        tok, ["x"], [{"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}]
    ) == ["s\n\nq\nx"]


def test_a_session_is_set_up_once_by_the_run_and_torn_down(rm_dir):
    """`rewards: [reward_model, format]`: two objectives; the reward model's column equals its session's
    scores, the format column is 1 where a \\boxed{} is (rows 0 and 2)."""
    rewards = resolve_rewards([{"name": "reward_model", "model": str(rm_dir), "batch_size": 2}, "format"])
    live = open_rewards(rewards, torch.device("cpu"))
    assert isinstance(live[0][0], LiveReward) and live[1][0] is rewards[1][0]  # format is a plain function
    session = live[0][0].session
    objectives, n_failed = compute_rewards([c for c, _ in live], COMPLETIONS, ROWS)
    assert objectives.shape == (3, 2) and n_failed == [0, 0]
    assert objectives[:, 0].tolist() == pytest.approx(session(COMPLETIONS, ROWS), rel=1e-5)
    assert objectives[:, 1].tolist() == [1.0, 0.0, 1.0]
    close_rewards(live)
    assert session.model is None
    with pytest.raises(RuntimeError, match="not set up"):
        session(COMPLETIONS, ROWS)


def test_a_direct_call_loads_for_that_call_only(rm_dir):
    ((comp, _),) = resolve_rewards([{"name": "reward_model", "model": str(rm_dir)}])
    assert comp(COMPLETIONS, ROWS) == pytest.approx(_session(rm_dir)(COMPLETIONS, ROWS), rel=1e-5)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"dtype": "int8"}, "dtype must be one of float32"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"max_length": 1}, "max_length must be an integer >= 2"),
    ],
)
def test_bad_parameters_are_named(rm_dir, bad, match):
    with pytest.raises(ComponentError, match=match):
        resolve_rewards([{"name": "reward_model", "model": str(rm_dir), **bad}])


def test_a_classifier_with_two_labels_is_refused(tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    _, tok = tiny_reward_model_and_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=2,
    )
    LlamaForSequenceClassification(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="num_labels=2"):
        load_reward_model(str(tmp_path))


def test_the_documented_stateful_reward_runs_as_written(tmp_path, monkeypatch):
    """docs/guides/extending.md's stateful_reward block: set up once by open_rewards, scores len / scale
    ("abcd" -> 4 / 10 = 0.4, "" -> 0), torn down by close_rewards."""
    import sys

    from test_docs import doc_blocks

    from zoo.core import registry

    (tmp_path / "mylab_stateful.py").write_text(doc_blocks()["stateful_reward"][1])
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        __import__("mylab_stateful")
        live = open_rewards(resolve_rewards(["length_model"]), torch.device("cpu"))
        session = live[0][0].session
        assert compute_rewards([live[0][0]], ["abcd", ""], [{}, {}]).objectives[:, 0].tolist() == pytest.approx(
            [0.4, 0.0]
        )
        close_rewards(live)
        assert session.w is None
    finally:
        registry._REGISTRY["reward"].pop("length_model", None)
        sys.modules.pop("mylab_stateful", None)


def test_the_memory_breakdown_has_a_reward_model_line(rm_dir):
    """zoo bench's breakdown: the open reward model's weights are their own line (fp32: 4 bytes a
    parameter, every tensor of the tiny Llama RM counted once), not part of the policy's weights, and
    they are taken out of the activations."""
    from types import SimpleNamespace

    from zoo.bench.memory import memory_breakdown
    from zoo.models.tiny import tiny_model_and_tokenizer

    policy, _ = tiny_model_and_tokenizer()
    live = open_rewards(
        resolve_rewards([{"name": "reward_model", "model": str(rm_dir)}, "format"]), torch.device("cpu")
    )
    rm = live[0][0].session.model
    want = sum(t.numel() * 4 for t in [*rm.parameters(), *rm.buffers()]) / 2**20
    st = SimpleNamespace(
        models=SimpleNamespace(policy=policy, critic=None),
        reference=None,
        optimizer=None,
        critic_optimizer=None,
        rewards=live,
        gold=[],
    )
    m = memory_breakdown(st, runtime_mb=10.0, peak_mb=100.0)
    assert m["reward_model_mb"] == pytest.approx(want, rel=1e-9) and want > 0
    policy_mb = sum(t.numel() * 4 for t in [*policy.parameters(), *policy.buffers()]) / 2**20
    assert m["weights_mb"] == pytest.approx(policy_mb, rel=1e-9)
    assert m["activations_mb"] == pytest.approx(100.0 - 10.0 - policy_mb - want - m["gradients_mb"], rel=1e-9)
    close_rewards(live)


def test_a_causal_lm_is_refused_from_its_config_alone(tiny_model_dir, rm_dir, tmp_path):
    # the tiny policy (LlamaForCausalLM) as a reward model: refused when the reward resolves (zoo validate)
    with pytest.raises(
        ComponentError, match="is a causal language model, not a reward model .*: train one with `zoo rm train`"
    ):
        resolve_rewards([{"name": "reward_model", "model": str(tiny_model_dir)}])
    # config.json only, no weights: the same error, so nothing but the config was read
    (tmp_path / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(ComponentError, match="is a causal language model"):
        resolve_rewards([{"name": "reward_model", "model": str(tmp_path)}])
    with pytest.raises(ValueError, match="is a causal language model"):  # at load too, before the weights
        load_reward_model(str(tiny_model_dir))  # (it said "num_labels=2" after transformers' load report)
    resolve_rewards([{"name": "reward_model", "model": str(rm_dir)}])  # a one-label classifier passes


def test_a_two_label_classifier_is_refused_at_validate(tmp_path):
    import json

    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_labels=2,
    )
    cfg.architectures = ["LlamaForSequenceClassification"]
    cfg.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["LlamaForSequenceClassification"]
    with pytest.raises(ComponentError, match="num_labels=2"):
        resolve_rewards([{"name": "reward_model", "model": str(tmp_path)}])
