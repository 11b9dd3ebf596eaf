"""Reports use the values a run used and keep a damaged study.json's baseline; bounded work: a step far
beyond the task warns, long steps show progress, an absurd step count warns, the memory estimate caps
micro-batches at the rows that exist, and a LoRA rank above the layer width warns. Tiny model."""

import io
import json
import logging
import os

import pytest
import yaml
from conftest import tiny_run_config
from rich.console import Console

from zoo.checks import fit as me
from zoo.study import experiment, report, runner
from zoo.study.report.runs import ArmGroup, RunData
from zoo.study.report.seed_stats import pairing_note
from zoo.study.report.study_index import read_index
from zoo.study.report.table import used_values


@pytest.fixture(autouse=True)
def _no_crash_env(monkeypatch):
    monkeypatch.delenv("ZOO_FAIL_AT_STEP", raising=False)


# ---------------------------------------------------------------- 6. the values the run used
@pytest.mark.e2e
def test_an_arm_set_group_size_overridden_by_the_budget_is_reported_as_trained(tiny_model_dir, tmp_path):
    """`set: {group_size: 3}` with `budget.group_size: 2`: the arm trains with G = 2, and the report
    pairs it with the baseline (no "group sizes 3 vs 2"). The arm also sets clip.eps, so it is not grpo
    again (a study of two arms that resolve alike is refused: tests/study/test_study_keys.py)."""
    study = tmp_path / "study.yaml"
    task = {
        "name": "reasoning_gym",
        "dataset": "basic_arithmetic",
        "size": 16,
        "eval_size": 2,
        "fewshot": 0,
        "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    }
    study.write_text(
        yaml.safe_dump(
            {
                "name": "g",
                "model": str(tiny_model_dir),
                "task": task,
                "variants": ["grpo"],
                "ablations": {"g3": {"variant": "grpo", "set": {"group_size": 3, "clip.eps": 0.1}}},
                "budget": {"steps": 1, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "micro_batch": 4},
                "model_opts": {"autocast": "none"},
                "eval": {"enabled": False},
                "tracking": {"wandb": False},
                "rewards": ["correctness", {"name": "length", "weight": 0.5, "scale": 10.0}],
                "seeds": [0],
                "output_dir": str(tmp_path / "runs"),
            }
        )
    )
    st = experiment.load_study(study)
    assert runner.run_study(st, console=Console(file=open(os.devnull, "w"))) == 0
    recs = [json.loads(x) for x in (tmp_path / "runs" / "g3-s0" / "metrics.jsonl").read_text().splitlines()]
    assert next(r["count/completions"] for r in recs if "count/completions" in r) == 4.0  # 2 prompts x G = 2
    md = report.write_report(tmp_path / "runs", console=Console(file=io.StringIO(), width=300)).read_text()
    assert "group sizes" not in md and "unpaired" not in md
    row = next(x for x in md.splitlines() if x.startswith("| g3 |"))
    header = next(x for x in md.splitlines() if x.startswith("| arm |"))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert cells["group_size"] == "2"


def _ran(group_size_set, resolved_g, resolved_updates, budget_updates=None):
    cfg = {
        "variant": "grpo",
        "set": group_size_set,
        "budget": {"group_size": None, "updates": budget_updates},
        "task": {"name": "t"},
        "resolved_variant": {"group_size": resolved_g, "updates": resolved_updates},
    }
    return RunData("a-s0", None, [], {"status": "finished"}, cfg, 0, "finished")


def test_used_values_come_from_the_resolved_variant_not_the_set():
    """Variation: an arm's set of updates.minibatches = 4 that the budget replaced with 1x2 is shown 1x2."""
    r = _ran(
        {"updates.minibatches": 4, "group_size": 8}, 4, {"epochs": 1, "minibatches": 2}, {"epochs": 1, "minibatches": 2}
    )
    assert used_values(r) == {"group_size": "4", "updates": "1x2", "lr": "-", "max_new_tokens": "-"}
    other = _ran({}, 4, {"epochs": 1, "minibatches": 1})
    assert pairing_note(ArmGroup("a", [r]), ArmGroup("b", [other])) == ""


# ---------------------------------------------------------------- 7. a damaged study.json
def _study_dir(tmp_path, index_text: str):
    from test_report import _finished_run

    root = tmp_path / "runs" / "s"
    _finished_run(root / "grpo-s0", [0.25, 0.5])
    _finished_run(root / "dr_grpo-s0", [0.5, 0.75])
    (root / "study.json").write_text(index_text)
    return root


GOOD = json.dumps(
    {
        "name": "s",
        "file": "nowhere.yaml",
        "baseline": "grpo",
        "arms": [{"label": "grpo-s0", "arm": "grpo"}, {"label": "dr_grpo-s0", "arm": "dr_grpo"}],
    },
    indent=2,
)


def test_a_cut_study_json_keeps_its_baseline_and_warns(tmp_path):
    root = _study_dir(tmp_path, GOOD[: GOOD.index('"arms"') + 30])  # cut inside the arm list
    out = io.StringIO()
    md = report.write_report(root, console=Console(file=out, width=300)).read_text()
    assert "## Against the baseline `grpo`" in md  # not dr_grpo, the first arm by name
    assert f"{root / 'study.json'}: damaged" in md and "kept the baseline 'grpo' (read from its text)" in md
    assert "damaged" in out.getvalue()
    assert json.loads((root / "report.json").read_text())["baseline"] == "grpo"


def test_a_damaged_study_json_takes_the_baseline_from_the_study_file_or_the_first_arm(tmp_path):
    """Variations: the baseline key itself is lost (non-UTF-8 garbage after "file"): the study file
    it names gives it; without a study file, the first arm label read (the runner's default)."""
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({"name": "s", "baseline": "grpo"}))
    text = '{"name": "s", "file": ' + json.dumps(str(study_file)) + ', "updated": "x\xff'
    root = _study_dir(tmp_path, text)
    index, warning = read_index(root)
    assert index == {"name": "s", "baseline": "grpo"}
    assert f"kept the baseline 'grpo' (from the study file {study_file})" in warning
    (root / "study.json").write_bytes(b'{"name": "s", "arms": [{"label": "grpo-s0"}, {"label": "dr_grpo-s0"}], \xff')
    index, warning = read_index(root)
    assert index["baseline"] == "grpo" and [a["label"] for a in index["arms"]] == ["grpo-s0", "dr_grpo-s0"]
    assert "its first arm, the default baseline" in warning and "and the arm order (2 arms)" in warning
    (root / "study.json").write_text(GOOD)
    assert read_index(root) == (json.loads(GOOD), "")  # a good file: no warning


# ---------------------------------------------------------------- 8. work far beyond the task, progress
def test_prompts_per_step_far_beyond_the_task_warns_and_steps_show_progress(
    tiny_model_dir, tmp_path, caplog, monkeypatch
):
    """The example scaled to the tiny run: 1000 prompts per step on a 32-row task warns before the
    step; a step of several generate chunks reports each one to the progress listener."""
    from zoo.backends.generate import progress as step_progress
    from zoo.backends.generate.hf import generate_rollout
    from zoo.checks.fit import work_warnings
    from zoo.models.tiny import tiny_model_and_tokenizer
    from zoo.run import trainer

    monkeypatch.setattr("zoo.run.setup.available_memory", lambda device: 10**15)  # not this test's check
    # below the completions ceiling (zoo.checks.fit.MAX_COMPLETIONS; 1,000,000 prompts is refused before load)
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"prompts_per_step": 36_000})
    with caplog.at_level(logging.WARNING, logger="zoo.run.trainer"):
        trainer.setup(cfg)
    # the task: 32 training + 4 eval prompts
    assert (
        "budget.prompts_per_step = 36000 is 1e+03x the task's 36 prompts: each step repeats every "
        "prompt about 1000 times (144000 completions per step"
    ) in caplog.text
    assert (
        work_warnings(cfg.model_copy(update={"budget": cfg.budget.model_copy(update={"prompts_per_step": 144})}), 4, 36)
        == []
    )  # 4x the task: the limit itself is allowed
    model, tok = tiny_model_and_tokenizer()
    seen = []
    with step_progress.listening(lambda phase, done, total: seen.append((phase, done, total))):
        generate_rollout(model, tok, ["1+1=", "2+2=", "3+3="], group_size=3, max_new_tokens=2, micro_batch=4)
    assert seen == [("generate", 0, 9), ("generate", 4, 9), ("generate", 8, 9), ("generate", 9, 9)]
    step_progress.report("generate", 1, 2)  # no listener: nothing happens


def test_the_progress_bar_prints_progress_inside_a_long_step(capsys):
    """Variation: the bar's listener prints "step k: generated d of N completions" into the log once
    the interval has passed (here 0 s), and only while the bar is open."""
    from zoo.backends.generate import progress as step_progress
    from zoo.run.progress import progress_bar

    bar = progress_bar(True, 1, 0)
    bar.inner_every = 0.0
    with bar:
        step_progress.report("generate", 64, 1000)
    step_progress.report("generate", 128, 1000)
    err = capsys.readouterr().err
    assert "step   1: generated 64 of this round's 1000 completions" in err and "128 of this round's 1000" not in err


def test_budget_steps_of_1e18_warns(tiny_model_dir, tmp_path):
    """10**30 is refused by the config (integers are 64-bit); 10**18, inside int64, warns."""
    from zoo.checks.settings import unbounded_steps
    from zoo.run.trainer import validate_run

    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"steps": 10**18})
    _, warnings = validate_run(cfg)
    assert any(w.startswith("budget.steps = 1e+18 is more than 1000000 rollout steps") for w in warnings), warnings
    assert unbounded_steps(tiny_run_config(tiny_model_dir, tmp_path, budget={"steps": 1_000_000})) == []


# ---------------------------------------------------------------- 9. micro-batches capped at the rows
def test_a_huge_micro_batch_is_estimated_at_the_rows_that_exist(tiny_model_dir, tmp_path):
    from zoo.run import trainer

    by_hand = me.rollout_memory(
        prompts_per_step=2,
        group_size=4,
        micro_batch=8,
        generate_rows=8,
        prompt_tokens=10,
        max_new_tokens=6,
        layers=2,
        kv_heads=2,
        head_dim=8,
        vocab=100,
        kv_bytes=4,
    )
    huge = me.rollout_memory(
        prompts_per_step=2,
        group_size=4,
        micro_batch=10_000_000,
        generate_rows=10_000_000,
        prompt_tokens=10,
        max_new_tokens=6,
        layers=2,
        kv_heads=2,
        head_dim=8,
        vocab=100,
        kv_bytes=4,
    )
    assert huge == by_hand and by_hand["logits"] == 2 * 8 * 16 * 100 * 4
    # the example: budget.micro_batch 10000000 with 2 x 4 = 8 completions per step starts
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"micro_batch": 10_000_000})
    trainer.setup(cfg)


def test_generate_rows_are_capped_too():
    """Variation: GENERATE_BATCH (32) rows per generate call with a 6-row step is estimated at 6."""
    a = me.rollout_memory(
        prompts_per_step=3,
        group_size=2,
        micro_batch=2,
        generate_rows=32,
        prompt_tokens=5,
        max_new_tokens=5,
        layers=1,
        kv_heads=1,
        head_dim=4,
        vocab=10,
        kv_bytes=2,
    )
    assert a["kv_cache"] == 2 * 1 * 1 * 4 * 10 * 6 * 2


# ---------------------------------------------------------------- 10. a LoRA rank above the layer width
@pytest.mark.parametrize("r, targets, narrowest", [(128, ["q_proj", "v_proj"], 32), (40, ["q_proj", "k_proj"], 32)])
def test_a_lora_rank_above_the_layer_width_warns(r, targets, narrowest, tiny_model_dir, tmp_path, caplog):
    """The tiny Llama: hidden 64, 2 kv heads of 16 -> v_proj / k_proj are 64 -> 32 (width 32).
    r = 128 is above every layer's width (the example); r = 40 only above k_proj's (a variation)."""
    from zoo.run import trainer

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        model_opts={"autocast": "none", "lora": {"r": r, "alpha": 16, "target_modules": targets}},
    )
    with caplog.at_level(logging.WARNING, logger="zoo.run.trainer"):
        trainer.setup(cfg)
    assert f"model_opts.lora.r = {r} is larger than the width of the layers it adapts" in caplog.text
    assert f"min(in, out) = {narrowest}" in caplog.text and f"use r <= {narrowest}" in caplog.text
    caplog.clear()
    ok = tiny_run_config(
        tiny_model_dir,
        tmp_path / "ok",
        model_opts={"autocast": "none", "lora": {"r": 32, "alpha": 16, "target_modules": targets}},
    )
    with caplog.at_level(logging.WARNING, logger="zoo.run.trainer"):
        trainer.setup(ok)
    assert "lora.r" not in caplog.text


def test_validate_warns_about_the_lora_rank_from_the_meta_model(tiny_model_dir, tmp_path):
    """Variation: `zoo validate`'s after_load stage (a meta-device model, no LoRA wrapped) sees the same widths."""
    from zoo import checks
    from zoo.checks.pipeline import check_loadable

    cfg = tiny_run_config(
        tiny_model_dir,
        tmp_path,
        model_opts={"autocast": "none", "lora": {"r": 48, "alpha": 16, "target_modules": ["v_proj"]}},
    )
    v = checks.before_load(cfg)[1]
    rep = check_loadable(cfg, v)
    assert any("model_opts.lora.r = 48" in w and "min(in, out) = 32" in w for w in rep.warnings), rep
