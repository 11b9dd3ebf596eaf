"""Training and evaluating with an environment (`task.env`) on the tiny model."""

import json
import math

import pytest
import torch
from conftest import tiny_run_config

TASK = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "size": 32,
    "eval_size": 4,
    "fewshot": 0,
    "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
}


def _metrics(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.e2e
def test_two_grpo_steps_with_the_calculator_train_and_log_env_metrics(tiny_model_dir, tmp_path):
    from zoo.run.trainer import setup, train
    from zoo.step.pipeline import step

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path / "run",
        task={**TASK, "env": {"name": "calculator", "max_turns": 2, "max_total_tokens": 200}},
    )
    st = setup(cfg)
    before = {k: v.clone() for k, v in st.models.policy.named_parameters()}
    m = step(st).metrics
    for k in ("env/turns", "env/tool_calls", "env/tool_errors", "env/timeouts", "env/token_frac", "env/failed_frac"):
        assert math.isfinite(m[k]), k
    assert 1 <= m["env/turns"] <= 2 and m["env/failed_frac"] == 0
    assert math.isfinite(m["loss/policy"])
    changed = any(not torch.equal(before[k], v) for k, v in st.models.policy.named_parameters())
    assert changed
    train(cfg, resume=False, progress=False)
    rows = _metrics(tmp_path / "run")
    steps = [r for r in rows if "env/turns" in r]
    assert len(steps) == 2 and all(math.isfinite(r["env/token_frac"]) for r in steps)
    evals = [r for r in rows if "eval/tool_calls" in r]
    assert evals and all(math.isfinite(r["eval/tool_calls"]) for r in evals)
    from zoo.study.report import write_report  # the report gains a tool-use section

    text = write_report(tmp_path).read_text()
    assert "## Tool use" in text and "| `run` |" in text.split("## Tool use")[1]


def test_without_env_the_run_is_todays_single_turn(tiny_model_dir, tmp_path):
    """`env: null` and no `env` key give the same numbers, and no env metric."""
    from zoo.run.trainer import train

    a = tiny_run_config(tiny_model_dir, tmp_path / "a", task=TASK, eval={"enabled": False}, budget={"steps": 1})
    b = tiny_run_config(
        tiny_model_dir, tmp_path / "b", task={**TASK, "env": None}, eval={"enabled": False}, budget={"steps": 1}
    )
    train(a, resume=False, progress=False)
    train(b, resume=False, progress=False)
    ma, mb = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")

    def drop(r):
        return {k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))}

    assert [drop(r) for r in ma] == [drop(r) for r in mb]
    assert not any(k.startswith("env/") for r in ma for k in r)


def test_zoo_run_rejects_a_bad_env_before_loading_a_model(tiny_model_dir, tmp_path):
    from zoo.config.variant import VariantError
    from zoo.run.trainer import validate_run

    cfg = tiny_run_config(tiny_model_dir, tmp_path / "r", task={**TASK, "env": {"name": "calculater"}})
    with pytest.raises(
        VariantError, match="task.env.name: env 'calculater' is not registered; did you mean 'calculator'"
    ):
        validate_run(cfg)


@pytest.mark.e2e
def test_resume_mid_run_with_the_calculator_matches_an_uninterrupted_run(tiny_model_dir, tmp_path, monkeypatch):
    """Environments keep no state across steps: a resumed run's env metrics and losses are the
    uninterrupted run's."""
    from test_trainer import _step_records, assert_same_metrics

    from zoo.run.trainer import train

    kw = dict(
        task={**TASK, "env": {"name": "calculator", "max_turns": 2, "max_total_tokens": 200}},
        budget={"steps": 3},
        eval={"enabled": False},
    )
    train(tiny_run_config(tiny_model_dir, tmp_path / "full", **kw), progress=False)
    cut = tiny_run_config(tiny_model_dir, tmp_path / "cut", **kw)
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "2")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cut, progress=False)
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    ran = []
    train(cut, resume=True, progress=False, on_step=lambda s, m: ran.append(s))
    assert ran == [3]
    a, b = _step_records(tmp_path / "full"), _step_records(tmp_path / "cut")
    assert all("env/turns" in r for r in a)
    assert_same_metrics(a, b)


def test_tool_use_section_numbers():
    from zoo.study.report.runs import RunData
    from zoo.study.report.tool_use import tool_use_lines

    def run(label, calls, ev=None):
        recs = [
            {"step": i + 1, "env/turns": 1.0 + c, "env/tool_calls": c, "env/tool_errors": 0.0, "accuracy": 0.5}
            for i, c in enumerate(calls)
        ]
        recs += [{"step": len(calls), "eval/tool_calls": ev}] if ev is not None else []
        return RunData(label=label, dir=None, records=recs, summary={}, config={}, status="finished")

    no_env = RunData(
        label="plain-s0", dir=None, records=[{"step": 1, "accuracy": 0.25}], summary={}, config={}, status="finished"
    )
    assert tool_use_lines([no_env]) == []
    lines = tool_use_lines(
        [run("calc-s0", [0.0, 0.5, 1.0, 1.5], ev=1.0), run("calc-s1", [1.0, 1.0, 1.0, 1.0], ev=0.0), no_env]
    )
    calc = next(x for x in lines if x.startswith("| `calc`"))
    # tool calls: seed 0 halves 0.25 -> 1.25, seed 1 1 -> 1: mean 0.625 -> 1.125; eval (1 + 0) / 2
    assert calc.split(" | ")[1] == "0.625 → 1.125" and calc.split(" | ")[-1] == "0.500 |"
    plain = next(x for x in lines if x.startswith("| `plain`"))
    assert plain == "| `plain` | - | - | - | - | - |"
