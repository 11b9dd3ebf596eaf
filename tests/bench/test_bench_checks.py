"""`zoo bench`'s checks before any worker starts (zoo/bench/precheck.py), a failed worker as one
line, and the small messages: --updates, --vs trl without TRL, the autocast line, the memory table's
reward-model column."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from zoo import bench as zb
from zoo.bench.precheck import check_bench, worker_error

TINY_TASK = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "size": 32,
    "eval_size": 4,
    "fewshot": 0,
    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
}


def _bench(*args):
    import zoo.cli.bench  # noqa: F401  (registers the command, as main() does)
    from zoo.cli import app

    return CliRunner().invoke(app, ["bench", *args])


def _small(model_dir):
    return [
        "--model",
        str(model_dir),
        "--task",
        json.dumps(TINY_TASK),
        "--prompts",
        "2",
        "--group-size",
        "2",
        "--max-new-tokens",
        "4",
        "--steps",
        "1",
    ]


def test_an_unknown_variant_fails_before_any_worker(tiny_model_dir):
    # ppo first: before the check, its worker ran to the end and then grpoo failed with a traceback
    r = _bench("--memory", "ppo", "grpoo", *_small(tiny_model_dir))
    assert r.exit_code == 1
    assert "variant 'grpoo' not found; did you mean 'grpo'" in r.output and "known: " in r.output
    assert "worker:" not in r.output and "Traceback" not in r.output


def test_a_missing_reward_model_fails_before_any_worker(tiny_model_dir):
    r = _bench("--memory", "grpo", "--full", "--reward-model", "/nope/rm", *_small(tiny_model_dir))
    assert r.exit_code == 1
    assert "reward_model: /nope/rm does not exist" in r.output
    assert "worker:" not in r.output and "Traceback" not in r.output


def test_check_bench_passes_the_runs_that_start(tiny_model_dir):
    spec = zb.BenchSpec(model=str(tiny_model_dir), task=dict(TINY_TASK), prompts=2, group_size=2)
    check_bench(spec, ["ppo", "grpo"])  # no error: both would start
    with pytest.raises(ValueError, match="unknown parameter .nope.; allowed: eps"):  # a bad --set, too
        check_bench(zb.BenchSpec(model=str(tiny_model_dir), task=dict(TINY_TASK), sets={"clip.nope": 1}), ["grpo"])


STDERR = """\
/x/registry/grpo.yaml: clip 'ppo' can have no effect: one on-policy update per rollout
Loading weights: 100%|##########| 21/21
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/x/zoo/bench/run.py", line 34, in run_bench
    st = trainer.setup(run_config(spec, tmp), device=device)
         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/x/zoo/models/sources.py", line 98, in resolve_model
    raise FileNotFoundError(f"model directory not found: {name}")
FileNotFoundError: model directory not found: /nope
"""


def test_worker_error_is_the_exception_line_of_the_last_traceback():
    assert worker_error(STDERR) == "FileNotFoundError: model directory not found: /nope"
    two = (
        'Traceback (most recent call last):\n  File "a.py", line 1, in f\nValueError: first\n\n'
        "During handling of the above exception, another exception occurred:\n\n" + STDERR
    )
    assert worker_error(two) == "FileNotFoundError: model directory not found: /nope"  # the last one
    multi = 'Traceback (most recent call last):\n  File "a.py", line 1\n    x()\nVariantError: a: bad\nb: worse\n'
    assert worker_error(multi) == "VariantError: a: bad b: worse"  # a multi-line message joined
    assert worker_error("warning: w\nkilled\n") == "killed"  # no traceback: the last line
    assert worker_error("") == ""


def test_a_failing_worker_raises_one_line_naming_the_variant(tmp_path):
    # a model directory that does not exist: the worker process fails in setup with a traceback
    spec = zb.BenchSpec(variant="grpo", model=str(tmp_path / "nope"), task=dict(TINY_TASK), prompts=2, group_size=2)
    with pytest.raises(RuntimeError) as e:
        zb.bench_in_subprocess(spec)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert msg.startswith("benchmark worker zoo.bench grpo full none failed (exit 1): ")
    assert "nope" in msg and "Error" in msg


def test_updates_below_one_is_one_line():
    with pytest.raises(ValueError, match=r"^--updates 0x1: EPOCHS and MINIBATCHES must be >= 1$"):
        zb.parse_updates("0x1")
    with pytest.raises(ValueError, match="must be >= 1"):
        zb.parse_updates("2x0")
    r = _bench("grpo", "--updates", "0x1")
    assert r.exit_code == 1 and "EPOCHS and MINIBATCHES must be >= 1" in r.output
    assert "pydantic" not in r.output


def test_vs_trl_without_trl_prints_one_error_line(monkeypatch):
    import zoo.bench.trl

    monkeypatch.setattr(zoo.bench.trl, "trl_available", lambda: False)
    r = _bench("--vs", "trl")
    assert r.exit_code == 1
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "TRL is not installed" in errors[0]  # no stray "error: 1" (typer.Exit)


def test_the_autocast_line_says_auto_and_the_run_resolves_it_too():
    r = _bench("grpoo", "--autocast", "auto")  # fails at the variant check, after the autocast line
    choice, why = zb.resolve_bench_autocast("auto")
    assert f"autocast {choice} (auto: " in " ".join(r.output.split())
    r = _bench("grpoo", "--autocast", "none")
    assert "autocast none (--autocast none)" in r.output
    spec = zb.BenchSpec(autocast=choice, autocast_setting="auto")
    assert zb.run_config(spec, "/tmp/unused").model_opts.autocast == "auto"  # the run logs its own reason
    assert zb.run_config(zb.BenchSpec(autocast="bf16"), "/tmp/unused").model_opts.autocast == "bf16"


def _memory_result(rewards):
    row = {
        "variant": "grpo",
        "mode": "full",
        "step_s": 0.5,
        "phases": {"train": 0.2},
        "peak_mb": 2048.0,
        "weights_mb": 512.0,
        "reward_model_mb": 256.0 if len(rewards) > 2 else 0.0,
        "gradients_mb": 512.0,
        "optimizer_mb": 1024.0,
        "runtime_mb": 100.0,
        "activations_mb": 0.0,
    }
    spec = {
        "prompts": 2,
        "group_size": 2,
        "max_new_tokens": 4,
        "autocast": "none",
        "micro_batch": 4,
        "updates": "1x1",
        "rewards": rewards,
    }
    return {"rows": [row], "baseline": "grpo", "ratio_to_first": {"full": {"grpo": 1.0}}, "spec": spec}


def test_the_memory_table_has_a_reward_model_column_only_with_a_reward_model(capsys):
    from zoo.cli.bench_tables import console, print_memory

    with console.capture() as cap:
        print_memory(_memory_result(list(zb.BENCH_REWARDS)))
    assert "reward model" not in cap.get() and "optimizer" in cap.get()
    with console.capture() as cap:
        print_memory(_memory_result(list(zb.BENCH_REWARDS) + [{"name": "reward_model", "model": "rm"}]))
    assert "reward model" in cap.get() and "0.25" in cap.get()  # 256 MB = 0.25 GB
