"""Per-prompt eval records and the paired after - before accuracy over prompts (zoo.study.report.eval_delta)."""

import math

import pytest

from zoo.run.eval_record import cache_key, per_prompt, prompt_id, read_cached, read_record, write_cached, write_record
from zoo.study.report.eval_delta import delta_rows, paired_delta


def test_paired_delta_by_hand():
    # d = after - before = [0, 1, 1, -1]: mean 0.25; before 0.5, after 0.75
    before = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0}
    after = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}
    e = paired_delta(before, after)
    assert (e.n, e.before, e.after, e.delta) == (4, 0.5, 0.75, 0.25)
    assert e.low <= e.delta <= e.high and e.low < 0 < e.high  # 4 prompts, one worse: the interval holds 0
    assert e.verdict == "not distinguishable on these prompts"


def test_report_json_numbers_are_the_tables_numbers():
    from zoo.study.report.eval_delta import delta_json

    before = {"a": 1.0, "b": 0.0, "c": 0.0, "d": 1.0}
    after = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}
    (row,) = delta_json([("grpo-s0", {"before": before, "after": after}), ("empty", {})])
    assert (row["run"], row["prompts"], row["before"], row["after"], row["delta"]) == ("grpo-s0", 4, 0.5, 0.75, 0.25)
    assert row["low"] < 0 < row["high"] and row["verdict"] == "not distinguishable on these prompts"


def test_many_prompts_improving_exclude_zero_and_pairing_ignores_order():
    # 200 prompts: 40 go 0 -> 1, 5 go 1 -> 0, the rest unchanged: delta = 35/200 = 0.175
    before = {f"p{i}": (1.0 if i >= 160 else 0.0) for i in range(200)}
    after = dict(before)
    for i in range(40):
        after[f"p{i}"] = 1.0
    for i in range(160, 165):
        after[f"p{i}"] = 0.0
    e = paired_delta(before, dict(reversed(list(after.items()))))
    assert e.n == 200 and e.delta == pytest.approx(0.175)
    assert 0 < e.low < 0.175 < e.high < 0.3 and e.verdict == "improved"
    # the mirror image is "worse"
    assert paired_delta(after, before).verdict == "worse"


def test_partial_credit_is_not_an_exact_answer():
    # reasoning_gym scores "13" against gold "1" 0.5: exact accuracy counts it 0, as zoo.rewards.accuracy does
    before = {"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.5}
    after = {"a": 0.5, "b": 1.0, "c": 1.0, "d": 0.0}
    e = paired_delta(before, after)  # exact: before [0, 0, 1, 0] = 0.25, after [0, 1, 1, 0] = 0.5
    assert (e.n, e.before, e.after, e.delta) == (4, 0.25, 0.5, 0.25)


def test_unscored_and_unpaired_prompts_are_left_out():
    before = {"a": 1.0, "b": None, "c": 0.0, "x": 1.0}
    after = {"a": 0.0, "b": 1.0, "c": float("nan"), "y": 1.0}
    e = paired_delta(before, after)
    assert (e.n, e.delta, e.low) == (1, -1.0, None) and e.verdict == "too few prompts"
    assert paired_delta({}, after).verdict == "no data"


def test_records_round_trip_and_ids_follow_content(tmp_path):
    rows = [{"prompt": "1+1", "answer": "2"}, {"prompt": "2+2", "answer": "4"}]
    assert prompt_id(rows[0]) != prompt_id(rows[1]) and prompt_id(dict(rows[0])) == prompt_id(rows[0])
    scores = per_prompt(rows, [1.0, None])
    write_record(tmp_path, "before", scores)
    write_record(tmp_path, "after", per_prompt(rows, [1.0, 1.0]))
    rec = read_record(tmp_path)
    assert rec["before"] == scores and set(rec["after"].values()) == {1.0}
    header, table = delta_rows([("grpo-s0", rec), ("empty", {})])
    assert len(table) == 1 and table[0][0] == "grpo-s0" and table[0][1] == "1"
    with pytest.raises(ValueError, match="2 rows but 1 scores"):
        per_prompt(rows, [1.0])
    (tmp_path / "eval_prompts.json").write_text("{broken")
    assert read_record(tmp_path) == {}


def test_cache_key_changes_with_any_part_and_cache_round_trips(tmp_path):
    parts = {"model": "m", "precision": "bf16", "threads": 1, "rows": ["a", "b"]}
    k = cache_key(parts)
    assert k == cache_key(dict(reversed(list(parts.items()))))
    for name, other in (("precision", "fp32"), ("threads", 2), ("rows", ["a"])):
        assert cache_key({**parts, name: other}) != k
    assert read_cached(tmp_path, k) is None
    write_cached(tmp_path, k, {"eval/greedy_acc": 0.5}, {"a": 1.0, "b": 0.0}, parts)
    got = read_cached(tmp_path, k)
    assert got["metrics"]["eval/greedy_acc"] == 0.5 and got["scores"] == {"a": 1.0, "b": 0.0}
    assert math.isclose(sum(v for v in got["scores"].values()), 1.0)


def test_a_study_evaluates_before_training_once_and_reports_the_paired_change(tmp_path, tiny_model_dir, monkeypatch):
    """Two arms start from the same model: the first evaluates before training and caches it, the
    second reuses it (3 evaluations, not 4); each arm records per-prompt scores before and after, and
    report.md gains the paired after - before table."""
    import json
    import os

    from rich.console import Console
    from test_study_e2e import _study

    import zoo.run.progress as rp
    from zoo.study import experiment, runner

    calls = []
    real = rp.evaluate

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(rp, "evaluate", counting)
    path = _study(tmp_path, tiny_model_dir, ["grpo", "dr_grpo"], wandb=False)
    assert runner.run_study(experiment.load_study(path), console=Console(file=open(os.devnull, "w"))) == 0
    root = tmp_path / "runs" / "tiny-study"
    cached = list((root / "eval_before").glob("*.json"))
    assert len(calls) == 3 and len(cached) == 1
    shared = json.loads(cached[0].read_text())
    for arm in ("grpo-s0", "dr_grpo-s0"):
        summary = json.loads((root / arm / "summary.json").read_text())
        assert summary["eval/before"] == shared["metrics"]
        rec = read_record(root / arm)
        assert rec["before"] == shared["scores"] and set(rec["after"]) == set(rec["before"]) and len(rec["before"]) == 2
    md = (root / "report.md").read_text()
    assert "after − before, per prompt" in md and "grpo-s0" in md.split("after − before, per prompt")[1]
    numbers = json.loads((root / "report.json").read_text())["eval_after_minus_before"]  # numbers, not cells
    assert sorted(r["run"] for r in numbers) == ["dr_grpo-s0", "grpo-s0"]
    assert all(r["prompts"] == 2 and isinstance(r["before"], float) and isinstance(r["delta"], float) for r in numbers)


@pytest.mark.e2e
def test_arms_judged_by_different_rewards_do_not_share_the_eval_before(tmp_path, tiny_model_dir, monkeypatch):
    """The before-training eval is keyed by the reward that judges it: an arm whose correctness reward
    has another `fallback` evaluates before training itself (4 evaluations, 2 cached files), and a
    reward that raises in its own eval is that arm's error, whatever order the arms run in."""
    import json
    import os

    import yaml
    from rich.console import Console
    from test_study_e2e import _study

    import zoo.run.progress as rp
    from zoo.study import experiment, runner

    calls = []
    real = rp.evaluate
    monkeypatch.setattr(rp, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    path = _study(tmp_path, tiny_model_dir, ["grpo"], wandb=False)
    data = yaml.safe_load(path.read_text())
    data["ablations"] = {
        "strict": {"variant": "grpo", "set": {"rewards": [{"name": "correctness", "fallback": "none"}]}}
    }
    path.write_text(yaml.safe_dump(data))
    assert runner.run_study(experiment.load_study(path), console=Console(file=open(os.devnull, "w"))) == 0
    root = tmp_path / "runs" / "tiny-study"
    cached = [json.loads(p.read_text()) for p in (root / "eval_before").glob("*.json")]
    assert len(calls) == 4 and len(cached) == 2
    judges = sorted(json.dumps(c["key_parts"]["judge"], sort_keys=True) for c in cached)
    assert any('"none"' in j for j in judges) and not all('"none"' in j for j in judges)
