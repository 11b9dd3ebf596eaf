"""Bad inputs whose error used to name nothing ("Overflow when unpacking long long", "maximum recursion
depth exceeded", a codec error, DatasetGenerationError, "in use by pid ? on host ?"): each is now one
line naming the user's file, key or line and what is allowed. No model is loaded."""

from __future__ import annotations

import json
import logging
import os
import socket
import time

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app
from zoo.config.run import RunConfig
from zoo.config.variant import VariantError, read_yaml_file
from zoo.config.yaml_strict import MAX_NESTING

runner = CliRunner()
BASE = {"name": "r", "variant": "grpo", "model": "smollm2-135m-instruct-q4", "task": {"name": "bandit"}}


def _errors(tmp_path, data: dict) -> str:
    """`zoo validate --json` errors of a run file holding BASE with `data`."""
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump({**BASE, **data}))
    r = runner.invoke(app, ["validate", str(f), "--json"])
    assert r.exit_code == 1, r.output
    return " ".join(json.loads(r.stdout)[0]["errors"])


@pytest.mark.parametrize(
    "data, key, value",
    [
        ({"seed": 2**70}, "seed", 2**70),  # torch.manual_seed: "Overflow when unpacking long long"
        ({"seed": -(2**63) - 1}, "seed", -(2**63) - 1),
        ({"budget": {"steps": 10**30}}, "budget.steps", 10**30),
        ({"eval": {"seed": 2**64}}, "eval.seed", 2**64),
    ],
)
def test_an_integer_beyond_64_bits_names_the_key_and_the_range(tmp_path, data, key, value):
    errs = _errors(tmp_path, data)
    assert f"key {key!r}: {value} does not fit in a 64-bit integer" in errs
    assert "use a value between -2**63 and 2**63 - 1" in errs and "Overflow" not in errs


def test_the_64_bit_bounds_themselves_are_accepted():
    assert RunConfig(seed=2**63 - 1).seed == 2**63 - 1 and RunConfig(seed=-(2**63)).seed == -(2**63)


@pytest.mark.parametrize("key", ["sampling", "eval"])
@pytest.mark.parametrize("t", [1e-300, 0.001])
def test_a_tiny_temperature_is_refused_with_the_allowed_range(tmp_path, key, t):
    # 1e-300 used to fail at step 1 as "the previous updates diverged (optim.lr too high?)"
    errs = _errors(tmp_path, {key: {"temperature": t}})
    assert f"key '{key}.temperature': {t!r} is too small: a sampling temperature must be >= 0.01" in errs


def test_the_smallest_allowed_temperature_validates():
    assert RunConfig(sampling={"temperature": 0.01}, eval={"temperature": 0.01}).sampling.temperature == 0.01


@pytest.mark.parametrize("depth", [5000, MAX_NESTING + 1])
def test_yaml_nested_too_deeply_names_the_file(tmp_path, depth):
    f = tmp_path / "deep.yaml"
    f.write_text("name: x\nset: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(VariantError) as e:
        read_yaml_file(f)
    assert str(e.value).startswith(f"{f}: ") and "nested" in str(e.value) and "recursion depth" not in str(e.value)
    r = runner.invoke(app, ["run", str(f)])  # the command line says the same, exit 1
    assert r.exit_code == 1 and f"{f}: " in " ".join(r.output.split())


def test_nesting_at_the_limit_reads_and_an_alias_bomb_is_cheap(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("name: x\nset: " + "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1) + "\n")
    assert read_yaml_file(f)["name"] == "x"
    bomb, prev = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n', "a"
    for name in "bcdefghi":  # 9**9 leaves if expanded: the depth check must walk shared nodes once
        bomb += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = name
    f.write_text(bomb)
    assert len(read_yaml_file(f)["i"]) == 9
    f.write_text("a: &a [1, *a]\n")  # an alias cycle
    with pytest.raises(VariantError, match="nested more than"):
        read_yaml_file(f)


def test_a_set_value_nested_too_deeply_is_one_line(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text(yaml.safe_dump(BASE))
    for depth in (3000, MAX_NESTING + 5):
        r = runner.invoke(app, ["run", str(f), "--set", "budget=" + "[" * depth + "]" * depth])
        assert r.exit_code == 1 and "--set budget=...: the value" in r.output and "nest" in r.output


@pytest.mark.parametrize(
    "data, key, shown",
    [
        ({"rewards": ["correctness", {"weight": 2}]}, "rewards", "item 1, {weight: 2}, has no 'name'"),
        ({"gold": [{"name": "", "weight": 1}]}, "gold", "item 0, {name: , weight: 1}, has no 'name'"),
    ],
)
def test_a_reward_spec_without_a_name_names_the_key_and_the_form(tmp_path, data, key, shown):
    errs = _errors(tmp_path, data)
    assert f"run.yaml: key {key!r}: {shown}" in errs
    assert "each reward is a name (`correctness`) or a mapping `{name: <reward>, weight: <w>" in errs


@pytest.mark.parametrize(
    "bad, line",
    [
        (b'{"prompt": "q", "chosen": "\xff", "rejected": "b"}', 2),
        (b'{"prompt": "caf\xe9", "chosen": "a", "rejected": "b"}', 3),
    ],
)
def test_pairs_that_are_not_utf8_name_the_file_and_line(tmp_path, bad, line):
    from zoo.rm.data import read_jsonl_pairs

    ok = b'{"prompt": "q", "chosen": "a", "rejected": "b"}\n'
    f = tmp_path / "pairs.jsonl"
    f.write_bytes(ok + (b"\n" if line == 3 else b"") + bad + b"\n")
    with pytest.raises(ValueError, match=rf"^{f}:{line}: not UTF-8 text \(byte b'\\x(ff|e9)' at column \d+\)"):
        read_jsonl_pairs(f)


def test_zoo_rm_train_on_non_utf8_pairs_is_one_line(tmp_path):
    (tmp_path / "p.jsonl").write_bytes(b'{"prompt": "q", "chosen": "\xff", "rejected": "b"}\n')
    f = tmp_path / "rm.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "name": "rm",
                "model": "smollm2-135m-instruct-q4",
                "data": {"path": str(tmp_path / "p.jsonl"), "eval_size": 1},
            }
        )
    )
    r = runner.invoke(app, ["rm", "train", str(f)])
    text = " ".join((r.output + str(r.exception or "")).split())
    assert r.exit_code != 0 and f"{tmp_path / 'p.jsonl'}:1: not UTF-8 text" in text and "codec" not in text


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("this is not json\n", 1, "not valid JSON (Expecting value at column 1)"),
        ('{"question": "1+1", "answer": "2"}\n[1, 2]\n', 2, "a JSON list, not an object"),
    ],
)
def test_a_data_file_that_is_not_json_names_the_file_line_and_format(tmp_path, text, line, what):
    from zoo.tasks import load_task
    from zoo.tasks.base import TaskError

    f = tmp_path / "rows.jsonl"
    f.write_text(text)
    with pytest.raises(TaskError) as e:
        load_task({"name": "jsonl", "path": str(f), "eval_size": 1})
    assert str(e.value).startswith(
        f"data file {str(f)!r}, line {line}: {what}; expected JSON lines, one object per "
        'line ({"question": ..., "answer": ...}), or one JSON array'
    )
    assert "DatasetGenerationError" not in str(e.value)


def test_a_json_array_file_still_loads(tmp_path):
    from zoo.tasks import load_task

    f = tmp_path / "rows.json"
    f.write_text(json.dumps([{"question": f"{i}+1", "answer": str(i + 1)} for i in range(4)]))
    t = load_task({"name": "jsonl", "path": str(f), "eval_size": 1})
    assert len(t.train) == 3 and len(t.eval) == 1


def test_a_datasets_folder_holding_non_json_names_the_file_and_line(tmp_path, monkeypatch):
    from zoo.rm.data import read_dataset_pairs

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "prefs"
    src.mkdir()
    (src / "train.jsonl").write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\nchosen,rejected\n')
    with pytest.raises(ValueError) as e:
        read_dataset_pairs(str(src), None, "train")
    assert str(e.value).startswith(
        f"data.dataset {str(src)!r} (split 'train'): could not load it: data file "
        f"{str(src / 'train.jsonl')!r}, line 2: not valid JSON"
    )
    assert '{"prompt": ..., "chosen": ..., "rejected": ...}' in str(e.value)


@pytest.mark.parametrize(
    "questions, spec, why",
    [
        (
            ["1+1"] * 20,
            {"eval_size": 2},
            "its 20 rows hold 1 distinct question (repeats count once), and the 1 eval "
            "question(s) are kept out of training",
        ),
        (
            ["a", "b", "a", "b", "a"],
            {"eval_size": 1, "fewshot": 1},
            "its 5 rows hold 2 distinct questions (repeats count "
            "once), and the 1 eval and 1 few-shot question(s) are kept out of training",
        ),
    ],
)
def test_no_training_rows_says_why(tmp_path, questions, spec, why):
    from zoo.tasks import load_task
    from zoo.tasks.base import TaskError

    f = tmp_path / "same.jsonl"
    f.write_text("".join(json.dumps({"question": q, "answer": "2"}) + "\n" for q in questions))
    with pytest.raises(TaskError) as e:
        load_task({"name": "jsonl", "path": str(f), **spec})
    assert str(e.value).startswith(f"jsonl task {str(f)!r}: no training rows left: {why}")


def _dead_pid() -> int:
    pid = 4_000_000  # above Linux's default pid_max (4194304 is the largest possible): find one not running
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid += 1


@pytest.mark.parametrize(
    "text, why",
    [
        ("\x00garbage\n", "it names no owner"),
        ("", "it names no owner"),
        ("pid=?\nhost=?\n", "it names no owner"),
        (f"pid={{pid}}\nhost={socket.gethostname()}\n", "pid {pid} does not run on this host"),
    ],
)
def test_a_corrupt_or_hand_written_lock_of_no_live_process_is_taken_at_once(tmp_path, caplog, text, why):
    from zoo.run import lock

    pid = _dead_pid()
    path = tmp_path / lock.LOCK_NAME
    path.write_text(text.format(pid=pid))
    old = time.time() - 10  # past the grace a lease being written gets
    os.utime(path, (old, old))
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="zoo.run.lock"):
        with lock.locked(path, what="run folder R", ttl=60.0):
            assert "mode=lease" in path.read_text()  # ours now
    assert time.monotonic() - t0 < 5  # no 60 s (ttl) wait
    assert f"removed a stale lease file: {why.format(pid=pid)}" in caplog.text


def test_a_hand_written_lock_naming_a_live_process_of_this_host_is_kept(tmp_path):
    from zoo.run import lock

    path = tmp_path / lock.LOCK_NAME
    path.write_text(f"pid={os.getppid()}\nhost={socket.gethostname()}\n")
    os.utime(path, (time.time() - 10, time.time() - 10))
    with pytest.raises(lock.LockedError, match=rf"run folder R is in use by pid {os.getppid()} on host"):
        with lock.locked(path, what="run folder R", ttl=60.0):
            pass
    assert path.exists()


def test_a_fresh_ownerless_lock_names_an_unknown_owner_not_question_marks(tmp_path):
    from zoo.run import lock

    path = tmp_path / lock.LOCK_NAME
    path.write_text("junk")  # just written: could be a lease being written, so not removed yet
    with pytest.raises(lock.LockedError) as e:
        with lock.locked(path, what="run folder R", ttl=60.0):
            pass
    msg = str(e.value)
    assert "pid ?" not in msg and "in use by an unknown owner (the lease file names no pid and host)" in msg
