"""Reward functions: answer extraction, correctness (reasoning_gym scorer and math-verify), format,
length, NaN on failure, and user rewards by dotted path."""

import logging
import math
import sys
import textwrap

import pytest
import torch

from zoo.core.guards import RewardError
from zoo.core.registry import ComponentError, available
from zoo.rewards import (
    accuracy,
    compute_rewards,
    correct,
    correctness,
    extract_answer,
    extract_boxed,
    format_reward,
    length,
    resolve_reward,
    resolve_rewards,
)
from zoo.tasks import EASY_ARITHMETIC, load_task


@pytest.fixture(scope="module")
def rg_rows():
    task = load_task(
        {
            "name": "reasoning_gym",
            "dataset": "basic_arithmetic",
            "config": EASY_ARITHMETIC,
            "size": 8,
            "eval_size": 0,
            "seed": 0,
        }
    )
    return task.train


@pytest.mark.parametrize(
    "text, want",
    [
        ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{2} and a truncated \\boxed{3", "2"),
        ("\\boxed{ -17 }", "-17"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("$\\boxed{x^{2}}$", "x^{2}"),
        ("\\boxed 7.", "7"),
        ("no box 12", None),
    ],
)
def test_extract_boxed(text, want):
    assert extract_boxed(text) == want


def test_extract_answer_fallbacks():
    assert extract_answer("\\boxed{5} but 6") == "5"
    assert extract_answer("it is 1,234 or -7.5 then") == "-7.5"
    assert extract_answer("  seven  ") == "seven"
    assert extract_answer("seven", fallback="none") is None
    assert extract_answer("it is 8", fallback="text") == "it is 8"
    with pytest.raises(ValueError):
        extract_answer("x", fallback="nope")


def test_correctness_uses_reasoning_gym_scorer(rg_rows):
    rows = rg_rows[:3]
    gold = [r["answer"] for r in rows]
    good = [f"The answer is \\boxed{{{a}}}." for a in gold]
    # wrong answers that do not contain the gold (which would earn partial credit)
    wrong = [f"\\boxed{{{next(v for v in map(str, range(100, 200)) if a not in v)}}}" for a in gold]
    assert correctness(good, rows) == [1.0, 1.0, 1.0]
    assert correctness(wrong, rows) == [0.0, 0.0, 0.0]
    # reasoning_gym's partial credit: the gold answer inside a longer answer
    partial = correctness([f"\\boxed{{{gold[0]}0}}"], rows[:1])[0]
    assert 0.0 < partial < 1.0 and partial == pytest.approx(len(gold[0]) / (len(gold[0]) + 1))
    assert correct([1.0, partial, 0.0]).tolist() == [True, False, False]
    # without a box: last number by default, 0 with fallback "none"
    assert correctness([f"so it is {gold[0]}"], rows[:1]) == [1.0]
    assert correctness([f"so it is {gold[0]}"], rows[:1], fallback="none") == [0.0]


def test_correctness_math_verify_for_other_rows():
    row = {"question": "half?", "answer": "1/2", "source": "hf:x"}
    assert correctness(["so \\boxed{0.5}"], [row]) == [1.0]
    assert correctness(["\\boxed{\\frac{1}{2}}"], [row]) == [1.0]
    assert correctness(["\\boxed{0.4}"], [row]) == [0.0]
    assert correctness(["0.5"], [row], fallback="none") == [0.0]
    assert correctness(["\\boxed{1}"], [{"answer": "", "source": "hf:x"}]) == [None]  # no gold


def test_format_and_length():
    comps = ["\\boxed{3}", "3", "\\boxed{}", "x\n\\boxed{\n4}"]
    assert format_reward(comps, [{}] * 4) == [1.0, 0.0, 0.0, 1.0]
    assert format_reward(["<answer>3</answer>", "3"], [{}] * 2, pattern=r"<answer>.+</answer>") == [1.0, 0.0]
    assert length(["a" * 50, ""], [{}] * 2) == [0.5, 0.0]
    assert length(["a" * 10, "a" * 30], [{}] * 2, target=20) == [-0.5, -0.5]


def test_builtins_are_registered_and_checked():
    assert {"correctness", "format", "length"} <= set(available("reward"))
    with pytest.raises(ComponentError, match="fallback"):
        resolve_reward({"name": "correctness", "fallback": "maybe"})
    with pytest.raises(ComponentError, match="scale"):
        resolve_reward({"name": "length", "scale": 0})
    with pytest.raises(ComponentError, match="did you mean"):
        resolve_reward("corectness")


def test_compute_rewards_matrix(rg_rows):
    rows = rg_rows[:2]
    comps = [f"\\boxed{{{rows[0]['answer']}}}", "no idea"]
    fns = [c for c, _ in resolve_rewards(["correctness", {"name": "format", "weight": 0.5}])]
    scores = compute_rewards(fns, comps, rows)
    objectives, n_failed = scores
    assert objectives.shape == (2, 2) and objectives.dtype == torch.float32
    assert objectives[:, 1].tolist() == [1.0, 0.0] and objectives[0, 0] == 1.0
    assert n_failed == [0, 0]
    assert resolve_rewards([{"name": "format", "weight": 0.5}])[0][1] == 0.5


def test_raising_and_none_rows_are_unscored_and_counted(caplog):
    def picky(completions, rows):
        out = []
        for c in completions:
            if c == "bad":
                raise RuntimeError("cannot score this")
            out.append(None if c == "none" else 1.0)
        return out

    def broken(completions, rows):
        raise KeyError("always")

    comps = ["ok", "bad", "none", "ok"]
    with caplog.at_level(logging.WARNING):
        objectives, n_failed = compute_rewards([picky, broken], comps, [{}] * 4)
    assert torch.isnan(objectives[:, 0]).tolist() == [False, True, True, False]
    assert objectives[0, 0] == 1.0 and objectives[3, 0] == 1.0
    assert torch.isnan(objectives[:, 1]).all()
    assert n_failed == [2, 4]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "cannot score this" in warnings[0]
    # the warning counts every unscored row (the raising one and the None one), as n_failed does
    assert "(2 of 4 rows unscored" in warnings[0] and "(4 of 4 rows unscored" in warnings[1]


def _named(fn_name, body):
    def fn(completions, rows):
        return body(completions)

    fn.__qualname__ = fn_name
    return fn


@pytest.mark.parametrize(
    "ret, words",
    [
        (lambda c: [1.0, float("nan"), 0.0], ["row 1", "nan", "return None, not NaN"]),
        (lambda c: [1.0, 0.0, float("inf")], ["row 2", "inf"]),
        (lambda c: [1e300, 0.0, 1.0], ["row 0", "1e+300", "at most 1e+15 in magnitude"]),
        (lambda c: [0.0, 3e38, 1.0], ["row 1", "3e+38", "at most 1e+15 in magnitude"]),
        (lambda c: [1.0, "0.5", 0.0], ["a str", "row 1"]),
        (lambda c: [True, False, True], ["a bool", "row 0"]),
        (lambda c: torch.ones(3, 1), ["2-D Tensor", "(3, 1)"]),
        (lambda c: {"a": 1.0, "b": 0.0, "c": 1.0}, ["a dict"]),
        (lambda c: None, ["a NoneType"]),
        (lambda c: [1.0], ["returned 1 values for 3 completions"]),
        (lambda c: 1.0, ["a float"]),
    ],
)
def test_a_return_value_that_breaks_the_contract_stops_with_a_clear_error(ret, words):
    with pytest.raises(RewardError) as e:
        compute_rewards([_named("my_reward", ret)], ["a", "b", "c"], [{}] * 3)
    msg = str(e.value)
    assert "reward 'my_reward'" in msg and "one finite float per completion, or None" in msg
    for w in words:
        assert w in msg, (w, msg)
    assert "\n" not in msg  # one line


def test_a_wrong_value_in_the_row_by_row_retry_names_its_row():
    def fn(completions, rows):
        if len(completions) > 1:
            raise RuntimeError("batch refused")
        return ["x"] if completions[0] == "c" else [1.0]

    fn.__qualname__ = "retry"
    with pytest.raises(RewardError, match="reward 'retry' returned a str .* for row 2"):
        compute_rewards([fn], ["a", "b", "c"], [{}] * 3)


def test_numbers_of_any_kind_are_accepted():
    import numpy as np

    objectives, n_failed = compute_rewards(
        [
            lambda c, r: [1, np.float32(0.5), torch.tensor(0.25)],
            lambda c, r: torch.tensor([2.0, 3.0, 4.0]),
            lambda c, r: np.array([0.0, None, 1.0], dtype=object),
        ],
        ["a", "b", "c"],
        [{}] * 3,
    )
    torch.testing.assert_close(objectives[:, :2], torch.tensor([[1.0, 2.0], [0.5, 3.0], [0.25, 4.0]]))
    assert objectives[[0, 2], 2].tolist() == [0.0, 1.0] and math.isnan(objectives[1, 2])
    assert n_failed == [0, 0, 1]


def test_accuracy_counts_exact_scores_only():
    assert accuracy([1.0, 0.5, 0.0, 1.0]) == 0.5
    assert accuracy(torch.tensor([1.0, float("nan")])) == 1.0
    assert math.isnan(accuracy([float("nan")]))


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_user_rewards.py").write_text(
        textwrap.dedent("""
        def shouty(completions, rows, *, bonus=1.0):
            return [bonus if c.isupper() else 0.0 for c in completions]

        class Holder:
            @staticmethod
            def const(completions, rows):
                return [0.25] * len(completions)

        NOT_CALLABLE = 3

        def wrong_arity():
            return []

        def three_positional(completions, rows, extra):
            return [0.0] * len(completions)

        def needs_target(completions, rows, *, target):
            return [float(c == target) for c in completions]
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_user_rewards"
    sys.modules.pop("my_user_rewards", None)


def test_user_reward_by_dotted_path(user_module):
    plugins = [user_module]
    fn = resolve_reward({"name": f"{user_module}:shouty", "bonus": 2.0}, plugins)
    assert fn(["HI", "hi"], [{}, {}]) == [2.0, 0.0]
    assert resolve_reward(f"{user_module}.shouty", plugins)(["HI"], [{}]) == [1.0]
    assert resolve_reward(f"{user_module}:Holder.const", plugins)(["a"], [{}]) == [0.25]
    objectives, _ = compute_rewards([fn], ["OK"], [{}])
    assert objectives.tolist() == [[2.0]]
    with pytest.raises(ComponentError, match="unknown parameter"):
        resolve_reward({"name": f"{user_module}:shouty", "bonsu": 2.0}, plugins)


def test_a_required_keyword_only_parameter_is_accepted_when_given(user_module):
    fn = resolve_reward({"name": f"{user_module}:needs_target", "target": "7"}, [user_module])
    assert fn(["7", "8"], [{}, {}]) == [1.0, 0.0]
    with pytest.raises(ComponentError, match="missing required parameter 'target'"):
        resolve_reward(f"{user_module}:needs_target", [user_module])


@pytest.mark.parametrize("path", ["subprocess:call", "os:system", "my_user_rewards:shouty"])
def test_a_dotted_path_outside_the_plugins_is_refused_before_it_is_imported(path, user_module):
    sys.modules.pop("my_user_rewards", None)
    with pytest.raises(ComponentError) as e:
        resolve_reward(path)
    msg = str(e.value)
    mod = path.split(":")[0]
    assert f"module {mod!r} is not among this run's plugins (none)" in msg
    assert f"add `plugins: [{mod}]`" in msg and "known: arm_bernoulli, arm_gaussian, correctness, format, length" in msg
    assert "my_user_rewards" not in sys.modules  # refused before importing (importing runs code)
    # a plugin package trusts its submodules; another module stays refused
    with pytest.raises(ComponentError, match="not among this run's plugins \\(mylab\\)"):
        resolve_reward(path, ["mylab"])


def test_a_path_registered_by_one_run_is_still_checked_for_the_next(user_module):
    resolve_reward(f"{user_module}:Holder.const", [user_module])
    with pytest.raises(ComponentError, match="not among this run's plugins"):
        resolve_reward(f"{user_module}:Holder.const")
    with pytest.raises(ComponentError, match="not among this run's plugins"):
        resolve_rewards([{"name": f"{user_module}:Holder.const", "weight": 0.5}])
    assert resolve_rewards([f"{user_module}:Holder.const"], plugins=[f"{user_module}"])[0][1] == 1.0


@pytest.mark.parametrize(
    "path, words",
    [
        ("no_such_module_xyz:fn", ["could not be imported"]),
        ("my_user_rewards:nope", ["no attribute"]),
        ("my_user_rewards:NOT_CALLABLE", ["not callable"]),
        ("my_user_rewards:wrong_arity", ["(completions, rows)"]),
        ("my_user_rewards:three_positional", ["(completions, rows)", "'extra' positionally"]),
    ],
)
def test_bad_dotted_paths(user_module, path, words):
    with pytest.raises(ComponentError) as e:
        resolve_reward(path, plugins=["my_user_rewards", "no_such_module_xyz"])
    for w in words:
        assert w in str(e.value)


def test_resolve_rewards_rejects_duplicates_empty_and_bad_weights():
    from zoo.rewards.compute import resolve_rewards

    with pytest.raises(ValueError, match="'format' listed more than once"):
        resolve_rewards([{"name": "format", "weight": -1}, "format"])  # reward/format would be overwritten
    with pytest.raises(ValueError, match="at least one reward"):
        resolve_rewards([])
    with pytest.raises(ValueError, match="finite"):
        resolve_rewards([{"name": "format", "weight": float("inf")}])
    with pytest.raises(ValueError, match="must be a number"):
        resolve_rewards([{"name": "format", "weight": "heavy"}])
    assert [w for _, w in resolve_rewards(["correctness", {"name": "format", "weight": 0.5}])] == [1.0, 0.5]


def test_a_weight_that_is_no_number_is_shown_as_written():
    # the message showed the spec after the weight was taken out ({'name': 'format'}), not the value
    from zoo.rewards.compute import resolve_rewards

    with pytest.raises(ValueError) as e:
        resolve_rewards(["correctness", {"name": "format", "weight": "high"}])
    assert "weight of 'format' must be a number, got 'high'" in str(e.value)
