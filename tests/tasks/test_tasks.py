"""Task loading (reasoning_gym, local files), few-shot prompts, spec errors and the prompt stream."""

import json
import logging

import pytest

from zoo.tasks import (
    EASY_ARITHMETIC,
    EASY_ARITHMETIC_TASK,
    PromptStream,
    TaskError,
    build_prompt,
    load_task,
    question_key,
)

RG = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "config": EASY_ARITHMETIC,
    "size": 64,
    "eval_size": 32,
    "fewshot": 2,
    "seed": 0,
}


def qs(rows):
    return {question_key(r["question"]) for r in rows}


@pytest.fixture(scope="module")
def rg_task():
    return load_task(RG)


def test_reasoning_gym_rows_have_the_documented_fields(rg_task):
    assert len(rg_task.train) == 64 and len(rg_task.eval) == 32 and len(rg_task.fewshot) == 2
    row = rg_task.train[0]
    assert {"prompt", "question", "answer", "source", "id", "rg_entry", "rg_spec"} <= set(row)
    assert row["source"] == "reasoning_gym:basic_arithmetic"
    assert row["rg_entry"]["question"] == row["question"] and row["rg_entry"]["answer"] == row["answer"]
    msgs = row["prompt"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[-1]["content"].startswith(row["question"]) and "\\boxed{}" in msgs[-1]["content"]
    assert msgs[1]["content"] == f"The answer is \\boxed{{{rg_task.fewshot[0]['answer']}}}."


def test_splits_are_disjoint_and_fewshot_is_held_out(rg_task):
    shots = qs(rg_task.fewshot)
    assert not qs(rg_task.train) & qs(rg_task.eval)
    assert not shots & (qs(rg_task.train) | qs(rg_task.eval))
    assert len(qs(rg_task.eval)) == len(rg_task.eval)  # eval questions are distinct


def test_loading_is_deterministic_per_seed(rg_task):
    again = load_task(RG)
    assert [r["question"] for r in again.train] == [r["question"] for r in rg_task.train]
    assert [r["question"] for r in again.eval] == [r["question"] for r in rg_task.eval]
    other = load_task({**RG, "seed": 1})
    assert [r["question"] for r in other.train] != [r["question"] for r in rg_task.train]


def test_eval_does_not_depend_on_train_size(rg_task):
    bigger = load_task({**RG, "size": 128})
    assert [r["question"] for r in bigger.eval] == [r["question"] for r in rg_task.eval]


def test_spec_is_resolved_and_system_prompt_goes_first():
    task = load_task({**RG, "fewshot": 0, "system": "Be brief.", "size": 4, "eval_size": 2})
    assert task.spec["seed"] == 0 and task.spec["instruction"]
    assert [m["role"] for m in task.train[0]["prompt"]] == ["system", "user"]


def test_given_fewshot_examples_are_used_and_excluded():
    q = "Calculate 5 - 3."
    task = load_task({**RG, "fewshot": [{"question": q, "answer": "2"}], "size": 256, "eval_size": 64})
    assert task.fewshot == [{"question": q, "answer": "2"}]
    assert q not in qs(task.train) | qs(task.eval)
    assert task.train[0]["prompt"][0]["content"].startswith(q)


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"name": "reasoning_gm"}, ["reasoning_gym", "hf", "jsonl"]),
        ({"name": "reasoning_gym", "dataset": "basic_arithmetc"}, ["basic_arithmetic"]),
        ({"name": "reasoning_gym", "dataset": "basic_arithmetic", "config": {"min_term": 2}}, ["min_terms"]),
        ({"name": "reasoning_gym", "dataset": "basic_arithmetic", "config": {"min_terms": 0}}, ["min_terms"]),
        ({"name": "reasoning_gym", "dataset": "basic_arithmetic", "sise": 3}, ["size"]),
        ({"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 0}, ["size"]),
        ({"name": "reasoning_gym", "dataset": "basic_arithmetic", "fewshot": "two"}, ["fewshot"]),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, words):
    with pytest.raises(TaskError) as e:
        load_task(spec)
    for w in words:
        assert w in str(e.value)


def test_too_small_problem_space_is_an_error():
    tiny = {
        "min_terms": 1,
        "max_terms": 1,
        "min_digits": 1,
        "max_digits": 1,
        "operators": ["+"],
        "allow_negation": False,
        "allow_parentheses": False,
    }
    with pytest.raises(TaskError, match="distinct"):
        load_task({**RG, "config": tiny, "eval_size": 50, "fewshot": 0})


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_local_jsonl_with_custom_columns(tmp_path):
    data = [{"problem": f"What is {i} + {i}?", "solution": str(2 * i)} for i in range(40)]
    path = write_jsonl(tmp_path / "d.jsonl", data)
    task = load_task(
        {
            "name": "jsonl",
            "path": path,
            "prompt_column": "problem",
            "answer_column": "solution",
            "eval_size": 8,
            "fewshot": 2,
        }
    )
    assert len(task.eval) == 8 and len(task.fewshot) == 2 and len(task.train) == 30
    assert not qs(task.train) & qs(task.eval) and not qs(task.fewshot) & (qs(task.train) | qs(task.eval))
    row = task.train[0]
    assert row["source"] == f"hf:{path}" and "rg_entry" not in row
    assert row["answer"] == str(2 * int(row["question"].split()[2]))
    again = load_task(
        {
            "name": "hf",
            "path": path,
            "prompt_column": "problem",
            "answer_column": "solution",
            "eval_size": 8,
            "fewshot": 2,
        }
    )
    assert [r["question"] for r in again.train] == [r["question"] for r in task.train]


def test_answer_pattern_and_eval_file(tmp_path):
    train = write_jsonl(
        tmp_path / "train.jsonl", [{"question": f"q{i}", "answer": f"work #### {i}"} for i in range(10)]
    )
    test = write_jsonl(tmp_path / "test.jsonl", [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(8, 14)])
    task = load_task(
        {"name": "hf", "path": train, "eval_split": test, "eval_size": None, "answer_pattern": r"####\s*(.+)$"}
    )
    assert qs(task.eval) == {f"q{i}" for i in range(8, 14)}
    assert qs(task.train) == {f"q{i}" for i in range(8)}  # q8, q9 are eval questions
    assert {r["answer"] for r in task.train} == {str(i) for i in range(8)}


def test_missing_column_names_the_columns_present(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"problem": "1+1", "solution": "2"}])
    with pytest.raises(TaskError) as e:
        load_task({"name": "jsonl", "path": path})
    assert "'question'" in str(e.value) and "problem" in str(e.value) and "solution" in str(e.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(TaskError, match="no file"):
        load_task({"name": "jsonl", "path": str(tmp_path / "nope.jsonl")})


def test_build_prompt_keeps_a_worked_boxed_answer():
    msgs = build_prompt("Q2", fewshot=[{"question": "Q1", "answer": "1 + 1 = 2, so \\boxed{2}"}], instruction="")
    assert msgs == [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "1 + 1 = 2, so \\boxed{2}"},
        {"role": "user", "content": "Q2"},
    ]


def test_easy_task_constant_loads():
    task = load_task({**EASY_ARITHMETIC_TASK, "size": 8, "eval_size": 4})
    assert task.spec["config"]["operators"] == ["+", "-"]


def test_prompt_stream_is_seeded_covers_epochs_and_resumes():
    rows = [{"i": i} for i in range(10)]
    s = PromptStream(rows, seed=3)
    first = [r["i"] for r in s.take(10)]
    assert sorted(first) == list(range(10))  # one epoch visits every row once
    assert [r["i"] for r in PromptStream(rows, seed=3).take(10)] == first
    assert [r["i"] for r in PromptStream(rows, seed=4).take(10)] != first
    s.take(3)
    state = json.loads(json.dumps(s.state_dict()))  # serialisable
    expected = [r["i"] for r in s.take(12)]  # crosses into epoch 2
    resumed = PromptStream(rows, seed=3)
    resumed.load_state_dict(state)
    assert [r["i"] for r in resumed.take(12)] == expected
    with pytest.raises(ValueError, match="rows"):
        PromptStream(rows[:5], seed=3).load_state_dict(state)


def test_fewshot_answer_template_shows_worked_steps_from_metadata():
    spec = {
        "name": "reasoning_gym",
        "dataset": "basic_arithmetic",
        "size": 4,
        "eval_size": 2,
        "fewshot": 1,
        "config": {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 1,
            "operators": ["+"],
            "allow_negation": False,
            "allow_parentheses": False,
        },
        "fewshot_answer": "{expression} = {answer}. The answer is \\boxed{{answer}}.",
    }
    task = load_task(spec)
    ex = task.fewshot[0]
    a, b = (int(x) for x in ex["expression"].split("+"))
    worked = task.train[0]["prompt"][1]["content"]
    assert worked == f"{ex['expression']} = {a + b}. The answer is \\boxed{{{a + b}}}."


def test_an_empty_jsonl_names_the_file_without_an_offline_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "d.jsonl"
    path.write_text("")
    with pytest.raises(TaskError) as e:
        load_task({"name": "jsonl", "path": str(path)})
    msg = str(e.value)
    assert msg.startswith(f"data file {str(path)!r} is empty")
    assert "StopIteration" not in msg and "HF_HUB_OFFLINE" not in msg


def test_a_non_utf8_jsonl_names_the_file_line_and_byte(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(
        b'{"question": "1+1", "answer": "2"}\n{"question": "\xff", "answer": "3"}\n'
    )  # 0xff: 35 + 14 bytes in
    with pytest.raises(TaskError) as e:
        load_task({"name": "jsonl", "path": str(path)})
    assert str(e.value) == (
        f"data file {str(path)!r} is not UTF-8 text: byte b'\\xff' at offset 49 (line 2); re-save it as UTF-8"
    )


def test_a_list_valued_answer_column_is_an_error_not_its_str(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": f"q{i}", "answer": [str(i), "x"]} for i in range(4)])
    with pytest.raises(TaskError, match=r"column 'answer' \(answer_column\) holds a list in row 0 \(\['0', 'x'\]\)"):
        load_task({"name": "jsonl", "path": path, "eval_size": 1})


def test_an_answer_pattern_that_does_not_match_is_not_silent(tmp_path, caplog):
    # an unmatched answer was kept whole ("no marker here 3") as the gold answer, without a word
    rows = [{"question": f"q{i}", "answer": f"work #### {i}"} for i in range(9)] + [
        {"question": "q9", "answer": "no marker here 9"}
    ]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="zoo.tasks.hf"):
        task = load_task({"name": "jsonl", "path": path, "eval_size": 2, "answer_pattern": r"####\s*(.+)$"})
    assert "does not match 1 of 10 answers" in caplog.text and "row 9: 'no marker here 9'" in caplog.text
    assert len(task.train) + len(task.eval) == 10
    with pytest.raises(TaskError, match=r"matches none of the 10 answers .* \(e.g. row 0: 'work #### 0'\)"):
        load_task({"name": "jsonl", "path": path, "eval_size": 2, "answer_pattern": r"ANSWER:\s*(.+)$"})


def test_a_step_larger_than_the_task_repeats_prompts_and_is_warned():
    """The stream rolls into its next pass inside a batch, so 8 prompts from 3 rows repeat each about
    2.67x in one step (it runs: a warning, not a refusal); 3 from 3 or more rows repeat nothing."""
    from zoo.tasks.stream import repeats_within_step

    rows = [{"i": i} for i in range(3)]
    batch = [r["i"] for r in PromptStream(rows, seed=0).take(8)]
    assert len(batch) == 8 and sorted(set(batch)) == [0, 1, 2]
    assert repeats_within_step(3, 8) == (
        "budget.prompts_per_step 8 > the task's 3 training prompts (task.size): each step takes 8 prompts "
        "from 3, so it repeats prompts within the step (the prompt stream starts its next pass inside the "
        "batch), about 2.67x each; raise task.size or lower budget.prompts_per_step to 3 or less"
    )
    assert repeats_within_step(3, 3) is None and repeats_within_step(512, 8) is None
    assert repeats_within_step(0, 8) is None  # no rows: the loader refuses that itself
