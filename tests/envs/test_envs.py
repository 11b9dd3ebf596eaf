"""The calculator environment's safe evaluator and `task.env` validation (no model)."""

import pytest

from zoo.envs.arithmetic import MAX_DEPTH, CalcError, evaluate, format_number
from zoo.envs.base import env_errors, env_spec
from zoo.envs.calculator import Calculator, tool_reply


@pytest.mark.parametrize(
    "expr, want", [("12*7", 84), ("(2+3)*4", 20), ("-3+10/4", -0.5), ("7/2", 3.5), ("2 - -3", 5), ("1.5*2", 3.0)]
)
def test_arithmetic_values(expr, want):
    assert evaluate(expr) == want


@pytest.mark.parametrize(
    "expr, why",
    [
        ("__import__('os')", "Call is not allowed"),
        ("__import__('os').system('true')", "Call is not allowed"),
        ("(1).real", "Attribute is not allowed"),
        ("x + 1", "Name is not allowed"),
        ("2**999999", "Pow is not allowed"),
        ("9" * 17 + "*1", "beyond"),
        ("99999999*99999999", "beyond"),
        ("1e999", "not finite"),
        ("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1), "parentheses"),
        ("-" * 60 + "1", "nested deeper"),
        ("'a'*3", "only numbers"),
        ("[1,2]", "List is not allowed"),
        ("1/0", "division by zero"),
        ("1 +", "not an arithmetic expression"),
        ("", "empty"),
        ("1+" * 150 + "1", "longer than"),
    ],
)
def test_calculator_refuses_with_a_message(expr, why, monkeypatch):
    import ast
    import builtins

    real_compile = builtins.compile

    def forbidden(*a, **k):
        raise AssertionError("the calculator must never call eval/exec")

    def parse_only(source, filename, mode, flags=0, *a, **k):  # ast.parse compiles to an AST, never to code
        if not flags & ast.PyCF_ONLY_AST:
            raise AssertionError("the calculator must never compile code")
        return real_compile(source, filename, mode, flags, *a, **k)

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(builtins, "compile", parse_only)
    with pytest.raises(CalcError, match=why):
        evaluate(expr)


def test_depth_is_nesting_not_length():
    assert evaluate("+".join(["1"] * 40)) == 40  # a flat 40-term sum (issue 37 §6)
    assert evaluate("*".join(["1"] * 60)) == 1
    assert evaluate("+".join(["(1)"] * 40)) == 40  # 40 pairs of parentheses, none nested
    with pytest.raises(CalcError, match=f"nested deeper than {MAX_DEPTH}"):
        evaluate("1+(" * 40 + "1" + ")" * 40)


def test_format_number_writes_integral_floats_as_integers():
    assert [format_number(v) for v in (84, 3.0, 3.5, 1 / 3)] == ["84", "3", "3.5", "0.3333333333"]


def test_tool_reply_counts_errors_and_ends_on_a_turn_without_a_call():
    assert tool_reply("so <calc>12*7</calc>") == ("<result>84</result>", False)
    reply, err = tool_reply("<calc>__import__('os')</calc>")
    assert err and reply.startswith("<error>") and "not allowed" in reply
    reply, err = tool_reply("<calc>1+2")
    assert err and "</calc>" in reply
    assert tool_reply("The answer is \\boxed{84}.") == (None, False)
    env = Calculator()
    assert env.step(None, "<calc>x</calc>")[1:] == (False, {"tool_calls": 1, "tool_errors": 1})
    assert env.step(None, "\\boxed{3}") == (None, True, {})


def test_calculator_reset_states_the_format_and_shows_a_worked_call():
    shot = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "\\boxed{2}"}]
    row = {"prompt": [{"role": "system", "content": "S"}, *shot, {"role": "user", "content": "Q"}]}
    msgs, state = Calculator().reset(row, 0)
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert msgs[1:3] == shot  # the task's few-shot turns first, then the demonstration
    assert msgs[4]["content"] == "<calc>12*7</calc>" and msgs[5]["content"] == "<result>84</result>"
    assert msgs[-1]["content"].startswith("Q") and "<calc>expression</calc>" in msgs[-1]["content"]
    assert row["prompt"][-1]["content"] == "Q"  # the row is not changed
    msgs, _ = Calculator(demo=False).reset(row, 0)
    assert len(msgs) == 4


def test_env_spec_defaults_and_parameters():
    assert env_spec({"name": "reasoning_gym"}) is None
    s = env_spec({"env": "calculator"})
    assert (s.env, s.max_turns, s.max_total_tokens, s.timeout_s) == ({"name": "calculator"}, 4, 512, 10.0)
    s = env_spec({"env": {"name": "calculator", "max_turns": 2, "demo": False, "timeout_s": 0.5}})
    assert s.env == {"name": "calculator", "demo": False} and s.max_turns == 2 and s.timeout_s == 0.5
    assert s.build().demo is False


@pytest.mark.parametrize(
    "env, msg",
    [
        ("calculater", "did you mean 'calculator'"),
        ({"name": "calculator", "max_turn": 2}, "unknown key 'max_turn' (did you mean 'max_turns'?)"),
        ({"name": "calculator", "demos": True}, "did you mean 'demo'"),
        ({"name": "calculator", "max_turns": 0}, "task.env.max_turns: must be an integer >= 1"),
        ({"name": "calculator", "max_total_tokens": 1.5}, "task.env.max_total_tokens"),
        ({"name": "calculator", "timeout_s": -1}, "task.env.timeout_s"),
        ({"max_turns": 2}, "a mapping with 'name'"),
    ],
)
def test_env_errors_name_the_key(env, msg):
    errors = env_errors({"name": "reasoning_gym", "env": env})
    assert len(errors) == 1 and msg in errors[0] and errors[0].startswith("task.env")


def test_zoo_validate_checks_the_env_before_any_model(tmp_path):
    from zoo.study.validate import check_study_file

    p = tmp_path / "s.yaml"
    p.write_text(
        "variants: [grpo]\nmodel: ./no-such-model-needed-here\n"
        "task: {name: reasoning_gym, dataset: basic_arithmetic, env: {name: calculator, max_turn: 3}}\n"
    )
    rep = check_study_file(p)
    assert any("unknown key 'max_turn' (did you mean 'max_turns'?)" in e for e in rep.errors), rep.errors


def test_the_task_loader_ignores_the_env_key():
    from zoo.tasks import load_task

    spec = {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 4, "eval_size": 2, "fewshot": 0}
    a, b = load_task(spec), load_task({**spec, "env": "calculator"})
    assert [r["question"] for r in a.train] == [r["question"] for r in b.train]


def test_retry_asks_again_until_the_tasks_scorer_accepts():
    from zoo.envs.base import env_spec as spec_of
    from zoo.tasks import load_task

    row = load_task(
        {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 1, "eval_size": 0, "fewshot": 0}
    ).train[0]
    env = spec_of({"env": {"name": "retry", "message": "Wrong."}}).build()
    msgs, state = env.reset(row, 0)
    assert msgs == row["prompt"] and msgs is not row["prompt"]
    wrong = str(int(float(row["answer"])) + 1)
    assert env.step(state, f"\\boxed{{{wrong}}}") == ([{"role": "user", "content": "Wrong."}], False, {"retries": 1})
    assert env.step(state, f"\\boxed{{{row['answer']}}}") == (None, True, {"solved": 1})
    assert env_errors({"env": {"name": "retry", "fallback": "boxed"}})[0].startswith("task.env: env 'retry': fallback")
