"""The multi-turn rollout on the tiny model with a scripted generator and the real calculator: token
layout, loss mask, log-probs against one forward over the whole conversation, zero gradient through
environment tokens, the flags that end a trajectory, failures."""

import math
import time
from dataclasses import replace

import pytest
import torch

from zoo.core.generator_types import SamplingParams
from zoo.envs.base import env_spec
from zoo.envs.rollout import rollout
from zoo.envs.run import env_metrics, unscore_failed
from zoo.envs.tokens import render
from zoo.models.tiny import ScriptedGenerator, tiny_model_and_tokenizer

CALL, ANSWER = "<calc>12*7</calc>", "\\boxed{84}"


def _enc(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def _rows(*questions):
    return [{"prompt": [{"role": "user", "content": q}], "id": str(i), "answer": "84"} for i, q in enumerate(questions)]


def _run(script, rows, G=1, model=None, max_new_tokens=32, **env):
    m, tok = tiny_model_and_tokenizer()
    spec = env_spec({"env": {"name": "calculator", "demo": False, **env}})
    gen = ScriptedGenerator(tok, script, model=m if model else None)
    b = rollout(gen, tok, spec.build(), spec, rows, G, SamplingParams(max_new_tokens=max_new_tokens), seed=0)
    return b, tok, m, gen


def test_two_turn_layout_and_loss_mask():
    b, tok, _, gen = _run([CALL, ANSWER], _rows("What is 12*7?"))
    first, second = _enc(tok, CALL), _enc(tok, ANSWER) + [tok.eos_token_id]
    env = _enc(tok, "<|im_end|>\n<|im_start|>user\n<result>84</result><|im_end|>\n<|im_start|>assistant\n")
    n = len(first) + len(env) + len(second)
    assert b.lengths.tolist() == [n] and b.policy_tokens.tolist() == [len(first) + len(second)]
    assert b.completion_ids[0, :n].tolist() == first + env + second
    assert b.loss_mask[0, :n].tolist() == [True] * len(first) + [False] * len(env) + [True] * len(second)
    # the trained ids are exactly the sampled ids
    assert b.completion_ids[0][b.loss_mask[0]].tolist() == first + second
    # the prompt is the template of the env's first messages; turn 2 continued from prompt + turn 1 + env ids
    msgs = b.rows[0]["transcript"]
    assert b.prompt_ids[0][b.prompt_mask[0]].tolist() == _enc(tok, render(tok, msgs[:1], True))
    assert gen.calls[1][0] == b.prompt_ids[0][b.prompt_mask[0]].tolist() + first + env
    # incremental ids = the template of the whole transcript (ChatML only appends), up to its last "\n"
    whole = tok.decode(b.input_ids()[0][b.attention_mask()[0].bool()].tolist())
    assert whole + "\n" == render(tok, msgs, False)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    from zoo.envs.run import conversation  # what the sample tables show

    assert conversation(b.rows[0], b.texts[0]) == f"assistant: {CALL}\nuser: <result>84</result>\nassistant: {ANSWER}"
    assert conversation({"question": "q"}, "just text") == "just text"
    assert b.texts == [ANSWER] and b.extras["env_tokens"].tolist() == [len(env)]
    assert b.extras["env_turns"].tolist() == [2] and b.extras["env_tool_calls"].tolist() == [1]
    assert not b.truncated.any() and b.extras["env_max_turns"].tolist() == [0]


def test_a_sampled_eos_is_not_closed_twice():
    """A turn that ends with a sampled EOS while the env goes on (an unclosed call): the template's
    `<|im_end|>` is the sampled one (trained), the env's tokens start after it."""
    b, tok, _, _ = _run(["<calc>1+2", ANSWER], _rows("Q"))
    first = _enc(tok, "<calc>1+2") + [tok.eos_token_id]
    env_text = (
        "\n<|im_start|>user\n<error>no </calc> after <calc>: write <calc>expression</calc></error><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    env = _enc(tok, env_text)
    assert b.completion_ids[0, : len(first) + len(env)].tolist() == first + env
    assert b.loss_mask[0, : len(first) + 1].tolist() == [True] * len(first) + [False]
    assert b.extras["env_tool_errors"].tolist() == [1]


def test_policy_logprobs_equal_one_forward_over_the_whole_conversation():
    from zoo.step.logprobs import token_logprobs

    rows = _rows("What is 12*7?", "Calculate twelve times seven, please.")  # uneven prompts: left padding
    b, tok, m, _ = _run([CALL, ANSWER], rows, G=2, model=True)
    m.eval()
    with torch.no_grad():
        logp, _ = token_logprobs(m, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
    mask = b.loss_mask
    assert int(mask.sum()) == 4 * (len(_enc(tok, CALL)) + len(_enc(tok, ANSWER)) + 1)
    torch.testing.assert_close(logp[mask], b.logp_rollout[mask], rtol=1e-5, atol=1e-6)
    assert (b.logp_rollout[~mask] == 0).all()


def test_loss_gradient_at_positions_predicting_env_tokens_is_zero():
    from zoo.core.registry import build
    from zoo.models.forward import position_ids_from_mask
    from zoo.step.update import step_counts

    b, tok, m, _ = _run([CALL, ANSWER], _rows("What is 12*7?"), G=2)
    ids, att = b.input_ids(), b.attention_mask()
    P, T = b.prompt_ids.shape[1], b.completion_ids.shape[1]
    logits = m(input_ids=ids, attention_mask=att, position_ids=position_ids_from_mask(att)).logits
    logits.retain_grad()
    lp = torch.log_softmax(logits[:, P - 1 : P - 1 + T].float(), -1).gather(2, b.completion_ids[..., None])[..., 0]
    mask = b.loss_mask
    adv = torch.tensor([[1.0], [-0.5]]).expand(-1, T)
    res = build("clip", "ppo")(lp, lp.detach(), adv, mask)
    loss = build("aggregate", "token_mean")(res.loss, mask, step_counts(mask, 32))
    loss.backward()
    g = logits.grad[:, P - 1 : P - 1 + T].abs().sum(-1)  # [N, T]: the gradient at the position predicting token t
    env = (~mask) & b.completion_attention()
    assert env.sum() > 0 and (g[env] == 0).all()
    assert (g[mask] > 0).all()


def test_max_turns_ends_with_its_own_flag_not_truncation():
    b, *_ = _run(["<calc>1+1</calc>"], _rows("Q"), max_turns=2)
    assert b.extras["env_max_turns"].tolist() == [1] and b.extras["env_turns"].tolist() == [2]
    assert b.extras["env_tool_calls"].tolist() == [2] and not b.truncated.any()
    assert b.loss_mask[0, int(b.lengths[0]) - 1]  # it ends with a sampled token, no env message after


def test_max_total_tokens_truncates_before_an_env_message_that_does_not_fit():
    b, tok, _, _ = _run([CALL, ANSWER], _rows("Q"), max_total_tokens=30)
    assert b.truncated.tolist() == [True] and b.lengths.tolist() == [len(_enc(tok, CALL))]
    assert b.extras["env_turns"].tolist() == [1] and b.extras["env_max_turns"].tolist() == [0]


def test_max_total_tokens_cuts_a_turn():
    b, tok, _, _ = _run([CALL, ANSWER], _rows("Q"), max_total_tokens=10)
    assert b.truncated.tolist() == [True] and b.lengths.tolist() == [10]
    assert b.completion_ids[0].tolist() == _enc(tok, CALL)[:10] and b.texts == [CALL[:10]]


def test_a_turn_over_max_new_tokens_is_truncated():
    b, *_ = _run([CALL, ANSWER], _rows("Q"), max_new_tokens=5)
    assert b.truncated.tolist() == [True] and b.lengths.tolist() == [5] and b.extras["env_turns"].tolist() == [1]


class _Flaky:
    """Raises for the row with id "1", sleeps for id "2", else ends the trajectory."""

    stop = ("</calc>",)

    def reset(self, row, seed):
        return list(row["prompt"]), row["id"]

    def step(self, state, text):
        if state == "1":
            raise RuntimeError("tool crashed")
        if state == "2":
            time.sleep(0.5)
        return None, True, {"tool_calls": 1}


def test_raising_and_slow_envs_fail_only_their_trajectories(monkeypatch):
    m, tok = tiny_model_and_tokenizer()
    spec = env_spec({"env": {"name": "calculator", "timeout_s": 0.05}})
    rows = _rows("a", "b", "c")
    b = rollout(ScriptedGenerator(tok, [ANSWER]), tok, _Flaky(), spec, rows, 2, SamplingParams(max_new_tokens=16), 0)
    assert b.extras["env_failed"].tolist() == [0, 0, 1, 1, 1, 1]
    assert b.extras["env_timeouts"].tolist() == [0, 0, 0, 0, 1, 1]
    assert b.extras["env_tool_calls"].tolist() == [1, 1, 0, 0, 0, 0]
    assert [r["env_failed"] for r in b.rows] == [False, False, True, True, True, True]
    obj = torch.ones(6, 2)
    out, n_failed = unscore_failed(b, obj, [0, 0])
    assert torch.isnan(out[2:]).all() and (out[:2] == 1).all() and n_failed == [4, 4]
    met = env_metrics(b)
    assert not any(k.startswith("env/reward_calls") for k in met)  # not scored yet
    met = env_metrics(replace(b, objectives=torch.tensor([[1.0], [0.0], [1.0], [1.0], [1.0], [math.nan]])))
    assert met["env/reward_calls_1"] == 0.5 and met["env/reward_calls_0"] == 1.0 and "env/reward_calls_2plus" not in met
    assert met["env/failed_frac"] == pytest.approx(4 / 6, rel=1e-6) and met["env/timeouts"] == pytest.approx(2 / 6)


def test_step_batch_serves_all_rows_in_one_call():
    calls = []

    class Batched(_Flaky):
        def step(self, state, text):
            raise AssertionError("step_batch should be used")

        def step_batch(self, states, texts):
            calls.append(len(states))
            return [(None, True, {"tool_calls": 2})] * len(states)

    m, tok = tiny_model_and_tokenizer()
    spec = env_spec({"env": "calculator"})
    b = rollout(
        ScriptedGenerator(tok, [ANSWER]), tok, Batched(), spec, _rows("a", "b"), 2, SamplingParams(max_new_tokens=16), 0
    )
    assert calls == [4] and b.extras["env_tool_calls"].tolist() == [2] * 4


def test_a_tool_result_with_the_answer_does_not_score_as_correct():
    from zoo.core.registry import build

    correctness = build("reward", "correctness")
    wrong, *_ = _run([CALL, "I do not know."], _rows("What is 12*7?"))
    right, *_ = _run([CALL, ANSWER], _rows("What is 12*7?"))
    assert "<result>84</result>" in [m["content"] for m in wrong.rows[0]["transcript"]]
    assert correctness(wrong.texts, wrong.rows) == [0.0]
    assert correctness(right.texts, right.rows) == [1.0]


def test_groups_stay_together():
    b, *_ = _run([CALL, ANSWER], _rows("a", "b", "c"), G=3)
    assert b.group_ids.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [r["id"] for r in b.rows] == ["0"] * 3 + ["1"] * 3 + ["2"] * 3
    assert not math.isnan(float(b.logp_rollout.sum()))


def test_gae_steps_over_env_tokens_from_one_turn_to_the_next():
    """GAE over [a a e e a] (e: env tokens) equals GAE over the packed [a a a], put back in place;
    running it along the raw row (env values zeroed) would give other numbers."""
    from zoo import AdvantageInputs
    from zoo.core.registry import build
    from zoo.envs.packing import packed_advantage

    gae = build("advantage", {"name": "gae", "gamma": 1.0, "lam": 0.9})
    mask = torch.tensor([[True, True, False, False, True]])
    values = torch.tensor([[0.5, 0.25, 9.0, 9.0, 0.75]])
    inp = AdvantageInputs(
        scores=torch.tensor([1.0]),
        mask=mask,
        group_ids=torch.tensor([0]),
        kl_reward=torch.zeros(1, 5),
        values=values,
        token_rewards=torch.tensor([[0, 0, 0, 0, 1.0]]),
    )
    got = packed_advantage(gae, inp)
    # by hand on the packed row V = (0.5, 0.25, 0.75), r = (0, 0, 1):
    # delta = (0.25 - 0.5, 0.75 - 0.25, 1 - 0.75) = (-0.25, 0.5, 0.25); A_2 = 0.25, A_1 = 0.5 + 0.9 * 0.25 = 0.725,
    # A_0 = -0.25 + 0.9 * 0.725 = 0.4025; returns = A + V
    want = torch.tensor([[0.4025, 0.725, 0.0, 0.0, 0.25]])
    torch.testing.assert_close(got.advantages, want, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(got.returns, want + values * mask, rtol=1e-5, atol=1e-7)
    naive = gae(inp).advantages
    assert not torch.allclose(naive[mask], want[mask])
    # no holes (single-turn): the estimator's own result, untouched
    prefix = replace(inp, mask=torch.tensor([[True, True, True, False, False]]))
    torch.testing.assert_close(packed_advantage(gae, prefix).advantages, gae(prefix).advantages, rtol=0, atol=0)


def test_otb_packs_the_energy_with_the_trained_tokens():
    """`otb` over [a a e e a] rows reads the energy of the trained tokens only, packed like the mask
    (verl's TIR-OTB): it equals `otb` on the packed rows [a a a], put back in place; the env positions'
    energy (9 here) is never read."""
    from zoo import AdvantageInputs
    from zoo.components.advantage.peer import otb
    from zoo.envs.packing import packed_advantage

    hole = torch.tensor([[True, True, False, False, True]] * 2)
    energy = torch.tensor([[1.0, 2.0, 9.0, 9.0, 3.0], [0.5, 1.0, 9.0, 9.0, 2.0]])
    rewards = torch.tensor([[0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0.0]])

    def inp(mask, e, r):
        n, t = mask.shape
        return AdvantageInputs(
            torch.tensor([1.0, 0.0]),
            mask,
            torch.tensor([0, 0]),
            torch.zeros(n, t),
            token_rewards=r,
            extras={"otb_energy": e},
        )

    got = packed_advantage(otb, inp(hole, energy, rewards))
    keep = [0, 1, 4]
    want = otb(inp(torch.ones(2, 3, dtype=torch.bool), energy[:, keep], rewards[:, keep]))
    torch.testing.assert_close(got.advantages[:, keep], want.advantages)
    assert (got.advantages[:, 2:4] == 0).all()
    # B_0 = (1 * 1 + 0 * .5) / 1.5 = 2/3: the first row's first advantage is 1 - 2/3
    assert float(got.advantages[0, 0]) == pytest.approx(1 / 3, rel=1e-5)
