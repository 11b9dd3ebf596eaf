"""zoo.study.experiment: study files -> arms; validate, dry run, shard, run/skip/resume, failures recorded."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from zoo.config.run import RunConfig
from zoo.config.variant import VariantError
from zoo.run.tracking import Tracker
from zoo.study import experiment as E
from zoo.study import runner as R
from zoo.study import validate as VAL
from zoo.study.run_file import load_run_config, single_arm_config

STUDY = """
name: demo
budget: {steps: 3, prompts_per_step: 2, max_new_tokens: 32, group_size: 4, updates: {epochs: 1, minibatches: 2}}
optim: {lr: 2.0e-5}
tracking: {wandb: false}
seeds: [0, 1]
variants: [grpo, dapo]
ablations:
  dapo-no-clip-higher: {variant: dapo, set: {clip: ppo}}
"""


def _write(tmp_path: Path, text: str, extra: dict | None = None, name: str = "demo.yaml") -> Path:
    data = yaml.safe_load(text)
    data["output_dir"] = str(tmp_path / "runs" / "demo")
    data.update(extra or {})
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def _console() -> Console:
    return Console(file=io.StringIO(), width=250, color_system=None)


class FakeTrain:
    """Writes what the trainer writes (metrics.jsonl via Tracker, summary.json); fails on request."""

    def __init__(self, fail: set[str] = frozenset()):
        self.fail, self.calls = set(fail), []

    def __call__(self, cfg: RunConfig, resume: bool = True) -> dict:
        self.calls.append((cfg.name, resume))
        out = cfg.out_dir()
        out.mkdir(parents=True, exist_ok=True)
        tr = Tracker(out, config={}, wandb_opts=cfg.tracking.wandb_opts(), name=cfg.name)
        for s in range(cfg.budget.steps):
            tr.log(
                {
                    "reward/total": 0.1 * s + 0.01 * cfg.seed,
                    "count/completions": 8,
                    "time/step": 1.0,
                    "time/elapsed": float(s + 1),
                },
                step=s,
            )
        if cfg.name in self.fail:
            raise RuntimeError(f"boom in {cfg.name}")
        summ = {
            "status": "finished",
            "reward/total": 0.1 * (cfg.budget.steps - 1),
            "eval/before": {"eval/greedy_acc": 0.2},
            "eval/after": {"eval/greedy_acc": 0.3},
        }
        (out / "summary.json").write_text(json.dumps(summ))
        tr.finish()
        return summ


# --------------------------------------------------------------------------- load / expand


def test_expand_arms_labels_configs_and_dirs(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY))
    arms = E.expand_arms(st)
    assert [a.label for a in arms] == [
        "grpo-s0",
        "grpo-s1",
        "dapo-s0",
        "dapo-s1",
        "dapo-no-clip-higher-s0",
        "dapo-no-clip-higher-s1",
    ]
    ab = arms[5].config
    assert (ab.name, ab.variant, ab.set, ab.seed, ab.study, ab.arm) == (
        "dapo-no-clip-higher-s1",
        "dapo",
        {"clip": "ppo"},
        1,
        "demo",
        "dapo-no-clip-higher",
    )
    assert ab.out_dir() == tmp_path / "runs" / "demo" / "dapo-no-clip-higher-s1"
    assert ab.optim.lr == 2e-5 and ab.budget.group_size == 4 and ab.tracking.wandb is False


def test_sweep_grid_routes_slot_keys_to_set_and_others_to_run_config(tmp_path):
    extra = {
        "variants": ["dapo"],
        "ablations": {},
        "seeds": [3],
        "sweep": {"clip.eps_high": [0.28, 0.32], "optim.lr": [1.0e-5, 3.0e-5]},
        "set": {"kl.beta": 0.0},
    }
    arms = E.expand_arms(E.load_study(_write(tmp_path, STUDY, extra)))
    assert [a.label for a in arms] == [
        "dapo-clip.eps_high=0.28-optim.lr=1e-05-s3",
        "dapo-clip.eps_high=0.28-optim.lr=3e-05-s3",
        "dapo-clip.eps_high=0.32-optim.lr=1e-05-s3",
        "dapo-clip.eps_high=0.32-optim.lr=3e-05-s3",
    ]
    last = arms[-1].config
    assert last.set == {"kl.beta": 0.0, "clip.eps_high": 0.32} and last.optim.lr == 3e-5
    assert last.arm == "dapo-clip.eps_high=0.32-optim.lr=3e-05" and arms[-1].group == last.arm
    assert VAL.check_arms(arms).ok


def test_sweep_over_group_size_goes_to_the_budget(tmp_path):
    extra = {
        "variants": ["grpo"],
        "ablations": {},
        "seeds": [0],
        "sweep": {"group_size": [2, 8], "loss.entropy_bonus.coef": [0.01]},
    }
    arms = E.expand_arms(E.load_study(_write(tmp_path, STUDY, extra)))
    assert [a.label for a in arms] == [
        "grpo-group_size=2-loss.entropy_bonus.coef=0.01-s0",
        "grpo-group_size=8-loss.entropy_bonus.coef=0.01-s0",
    ]
    assert [a.config.budget.group_size for a in arms] == [2, 8]  # the study budget had 4: the sweep wins
    assert arms[0].config.set == {"loss.entropy_bonus.coef": 0.01}


def test_study_name_defaults_to_file_stem_and_output_dir_to_runs(tmp_path):
    p = tmp_path / "my_study.yaml"
    p.write_text("variants: [grpo]\n")
    st = E.load_study(p)
    assert st.name == "my_study" and st.study_dir() == Path("runs/my_study")
    assert E.expand_arms(st)[0].config.output_dir == str(Path("runs/my_study/grpo-s0"))


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"varaints": ["grpo"]}, "key 'varaints' is not allowed (did you mean 'variants'?)"),
        ({"budget": {"stepz": 3}}, "key 'budget.stepz' is not allowed (did you mean 'steps'?)"),
        ({"seeds": [0, 0]}, "key 'seeds': need at least one seed and no repeats"),
        ({"sweep": {"clipp.eps_high": [0.3]}}, "did you mean 'clip'?"),
        ({"sweep": {"clip.eps_high": []}}, "key 'sweep.clip.eps_high': needs at least one value"),
        ({"ablations": {"grpo": {"variant": "dapo"}}}, "grpo is also a variant arm"),
        ({"ablations": {"a b/c": {"variant": "dapo"}}}, "not usable as a folder name"),
        ({"ablations": {"x": {"variant": "dapo", "sett": {}}}}, "key 'ablations.x.sett' is not allowed"),
        ({"arm": "x"}, "key 'arm' is set by `zoo ablate`"),
        ({"name": ".."}, "'..' names the"),
        (
            {"variant": "ppo"},
            "key 'variant': a study's arms come from `variants`",
        ),  # was silently ignored  # would write beside runs/
        ({"name": "my study $(x)"}, "key 'name'"),
        ({"ablations": {"..": {"variant": "dapo"}}}, "not usable as a folder name"),
    ],
)
def test_study_errors_name_file_and_key(tmp_path, extra, needle):
    p = _write(tmp_path, STUDY, extra)
    with pytest.raises(VariantError) as e:
        E.load_study(p)
    assert str(p) in str(e.value) and needle in str(e.value)


def test_study_without_arms_is_an_error(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("budget: {steps: 2}\nseeds: [0]\n")
    with pytest.raises(VariantError, match="no arms"):
        E.load_study(p)


# --------------------------------------------------------------------------- validate


def test_check_study_file_reports_every_arm(tmp_path):
    rep = VAL.check_study_file(_write(tmp_path, STUDY))
    assert rep.ok, rep.errors
    assert any("6 arm(s)" in n for n in rep.notes)


def test_check_study_file_unknown_variant_and_bad_override(tmp_path):
    extra = {"variants": ["grpoo"], "ablations": {"bad": {"variant": "grpo", "set": {"clip.eps_hgh": 0.3}}}}
    rep = VAL.check_study_file(_write(tmp_path, STUDY, extra))
    assert not rep.ok and len(rep.errors) == 2
    assert "arm grpoo (seeds 0, 1)" in rep.errors[0] and "did you mean 'grpo'" in rep.errors[0]
    assert rep.errors[1].startswith("arm bad (seeds 0, 1):") and "eps_hgh" in rep.errors[1]
    assert rep.errors[1].startswith(
        "arm bad (seeds 0, 1): ablations.bad.set: clip.eps_hgh=0.3: "
    )  # where the typo was written, first


def test_bad_override_key_names_the_ablation_not_the_registry_file(tmp_path):
    extra = {"variants": [], "ablations": {"typo": {"variant": "grpo", "set": {"clp": "ppo"}}}}
    rep = VAL.check_study_file(_write(tmp_path, STUDY, extra))
    (err,) = rep.errors
    assert err.startswith("arm typo (seeds 0, 1): ablations.typo.set: key 'clp'"), err
    assert "did you mean 'clip'" in err and "registry" not in err


def test_check_study_file_uses_the_study_budget(tmp_path):
    # group_size 1 from the study budget breaks group-based GRPO; updates 1x1 makes the clip a no-op
    extra = {
        "variants": ["grpo"],
        "ablations": {},
        "budget": {"group_size": 1, "updates": {"epochs": 1, "minibatches": 1}},
    }
    rep = VAL.check_study_file(_write(tmp_path, STUDY, extra))
    assert any("group_size 1 < 2" in m for m in rep.errors)
    assert any("can have no effect" in m for m in rep.warnings)


def test_ablation_set_of_a_block_merges_into_the_study_block(tmp_path):
    # `set: {budget: {group_size: 8}}` once replaced the whole budget, so steps fell back to the default
    # 8 and max_new_tokens to 64 without a word; the study's other budget keys must stay.
    extra = {
        "variants": [],
        "budget": {"steps": 12, "group_size": 4, "prompts_per_step": 4, "max_new_tokens": 24},
        "sampling": {"top_p": 0.9},
        "ablations": {
            "g8": {
                "variant": "grpo",
                "set": {"budget": {"group_size": 8, "prompts_per_step": 2}, "sampling": {"temperature": 0.7}},
            }
        },
        "seeds": [0],
    }
    (arm,) = E.expand_arms(E.load_study(_write(tmp_path, STUDY, extra)))
    b, s = arm.config.budget, arm.config.sampling
    assert (b.steps, b.group_size, b.prompts_per_step, b.max_new_tokens) == (12, 8, 2, 24)
    assert (s.temperature, s.top_p) == (0.7, 0.9)


def test_merge_keys_replaces_what_is_not_a_block():
    data = {"sampling": {"backend": "hf", "temperature": 1.0}, "rewards": ["correctness"]}
    got = E.merge_keys(data, {"sampling": {"backend": {"name": "noisy"}}, "rewards": [{"name": "format"}]})
    assert got == {"sampling.backend": {"name": "noisy"}, "rewards": [{"name": "format"}]}


def test_run_file_is_validated_as_one_arm(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("variant: dapo\nbudget: {updates: {epochs: 1, minibatches: 2}}\n")
    assert VAL.check_study_file(p).ok


# --------------------------------------------------------------------------- single arm


def test_single_arm_config_and_overrides(tmp_path):
    p = _write(tmp_path, STUDY, {"variants": ["grpo"], "ablations": {}, "seeds": [5]})
    cfg = single_arm_config(p, {"budget.steps": 7, "clip.eps": 0.1, "set.kl": "none"})
    assert (cfg.name, cfg.seed, cfg.budget.steps, cfg.set) == ("grpo-s5", 5, 7, {"clip.eps": 0.1, "kl": "none"})
    assert load_run_config(p).name == "grpo-s5"  # `zoo run study.yaml` goes through the same path (zoo.study.run_file)


def test_single_arm_config_lists_arms_when_several(tmp_path):
    p = _write(tmp_path, STUDY)
    with pytest.raises(VariantError) as e:
        single_arm_config(p)
    msg = str(e.value)
    assert "has 6" in msg and "grpo-s0, grpo-s1, dapo-s0" in msg and "zoo ablate" in msg and "--set" in msg
    cfg = single_arm_config(p, {"variants": ["dapo"], "ablations": {}, "seed": 1})
    assert cfg.name == "dapo-s1"


# --------------------------------------------------------------------------- shard / dry run


def test_shards_partition_sorted_labels(tmp_path):
    arms = E.expand_arms(E.load_study(_write(tmp_path, STUDY)))
    s0 = [a.label for a in R.select_shard(arms, (0, 2))]
    s1 = [a.label for a in R.select_shard(arms, (1, 2))]
    assert s0 == ["dapo-no-clip-higher-s0", "dapo-s0", "grpo-s0"]
    assert s1 == ["dapo-no-clip-higher-s1", "dapo-s1", "grpo-s1"]
    assert R.parse_shard("1/3") == (1, 3)
    for bad in ("2/2", "1", "a/b", "0/0"):
        with pytest.raises(VariantError, match="--shard"):
            R.parse_shard(bad)


def test_dry_run_prints_runnable_commands_and_trains_nothing(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY))
    con, train = _console(), FakeTrain()
    assert R.run_study(st, dry_run=True, write_configs=True, shard=(1, 2), train_fn=train, console=con) == 0
    out = con.file.getvalue()
    assert train.calls == []
    cmds = [line for line in out.splitlines() if line.startswith("zoo run ")]
    assert len(cmds) == 3 and "dapo-no-clip-higher-s1/config.yaml" in cmds[0]
    for line, arm in zip(cmds, R.select_shard(E.expand_arms(st), (1, 2))):
        cfg = load_run_config(line.split(" ", 2)[2])
        assert cfg == arm.config
    assert "grpo-s0" not in out.split("arm(s)")[1]  # shard 1 plans only its arms


def test_a_plain_dry_run_writes_nothing_and_says_how_to_write_the_configs(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY))
    before = sorted(tmp_path.rglob("*"))
    con = _console()
    assert R.run_study(st, dry_run=True, train_fn=FakeTrain(), console=con) == 0
    assert sorted(tmp_path.rglob("*")) == before  # no arm folder, no config.yaml, no study.json
    out = " ".join(con.file.getvalue().split())
    assert "dry run: nothing written; add --write-configs" in out and "zoo run " not in out
    assert "dapo-no-clip-higher-s1" in out  # the plan still lists every arm


# --------------------------------------------------------------------------- run


@pytest.mark.e2e
def test_run_study_records_failure_goes_on_and_resumes(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["grpo", "dapo"], "ablations": {}}))
    root = tmp_path / "runs" / "demo"
    train = FakeTrain(fail={"dapo-s1"})
    assert R.run_study(st, train_fn=train, console=_console()) == 1
    assert [c[0] for c in train.calls] == ["dapo-s0", "dapo-s1", "grpo-s0", "grpo-s1"]
    assert all(resume for _, resume in train.calls)
    failed = json.loads((root / "dapo-s1" / "summary.json").read_text())
    assert failed["status"] == "failed" and failed["error"] == "RuntimeError: boom in dapo-s1"
    assert "Traceback" in failed["traceback"] and "boom in dapo-s1" in failed["traceback"]
    index = json.loads((root / "study.json").read_text())
    assert {a["label"]: a["status"] for a in index["arms"]} == {
        "grpo-s0": "finished",
        "grpo-s1": "finished",
        "dapo-s0": "finished",
        "dapo-s1": "failed",
    }
    assert index["arms"][0]["config"] == str(root / "grpo-s0" / "config.yaml")
    assert (root / "grpo-s0" / "config.yaml").exists()
    report = (root / "report.md").read_text()
    assert "failed: RuntimeError: boom in dapo-s1" in report

    # re-run: finished arms are skipped, the failed one resumes and now finishes
    again = FakeTrain()
    assert R.run_study(st, train_fn=again, console=_console()) == 0
    assert again.calls == [("dapo-s1", True)]
    index = json.loads((root / "study.json").read_text())
    assert all(a["status"] == "finished" for a in index["arms"])


def test_run_study_invalid_arm_stops_before_training(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["grpo"], "ablations": {"x": {"variant": "nope"}}}))
    train = FakeTrain()
    with pytest.raises(VariantError, match="arm x"):
        R.run_study(st, train_fn=train, console=_console())
    assert train.calls == []


def test_run_study_train_returning_without_summary_counts_as_finished(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["grpo"], "ablations": {}, "seeds": [0]}))

    def train(cfg, resume=True):
        cfg.out_dir().mkdir(parents=True, exist_ok=True)
        return {"status": "finished", "reward/total": 1.0}

    assert R.run_study(st, train_fn=train, console=_console()) == 0
    assert json.loads((tmp_path / "runs/demo/grpo-s0/summary.json").read_text())["reward/total"] == 1.0


# --------------------------------------------------------------------------- stale or mixed results


ONE = {"variants": ["grpo"], "ablations": {}, "seeds": [0]}


def _records(d: Path) -> list[int]:
    from zoo.run.tracking import read_jsonl

    return [r["step"] for r in read_jsonl(d / "metrics.jsonl") if "reward/total" in r]


def test_rerun_with_changed_lr_is_refused_naming_the_key(tmp_path):
    path = _write(tmp_path, STUDY, ONE)
    assert R.run_study(E.load_study(path), train_fn=FakeTrain(), console=_console()) == 0
    train = FakeTrain()
    st = E.load_study(path, overrides={"optim.lr": 0.5, "budget.steps": 8})
    with pytest.raises(VariantError, match=r"budget.steps: 3 -> 8, optim.lr: 2e-05 -> 0.5; .*--fresh grpo-s0"):
        R.run_study(st, train_fn=train, console=_console())
    assert train.calls == []
    summ = json.loads((tmp_path / "runs/demo/grpo-s0/summary.json").read_text())
    assert summ["status"] == "finished" and summ["reward/total"] == pytest.approx(0.2)  # untouched
    con = _console()  # the dry run shows the same problem without failing the plan
    assert R.run_study(st, dry_run=True, train_fn=train, console=con) == 0
    assert "would refuse: " in con.file.getvalue() and "optim.lr: 2e-05 -> 0.5" in con.file.getvalue()


@pytest.mark.e2e
def test_grown_steps_continue_only_with_a_constant_schedule(tmp_path):
    path = _write(tmp_path, STUDY, ONE)
    R.run_study(E.load_study(path), train_fn=FakeTrain(), console=_console())
    con, train = _console(), FakeTrain()
    assert R.run_study(E.load_study(path, overrides={"budget.steps": 5}), train_fn=train, console=con) == 0
    assert train.calls == [("grpo-s0", True)] and "continue grpo-s0 to 5 steps" in con.file.getvalue()
    rec = json.loads((tmp_path / "runs/demo/grpo-s0/fingerprint.json").read_text())
    assert rec["fields"]["budget"]["steps"] == 5
    again = FakeTrain()  # the same study again: finished with the same fingerprint -> skipped
    assert R.run_study(E.load_study(path, overrides={"budget.steps": 5}), train_fn=again, console=_console()) == 0
    assert again.calls == []

    lin = _write(
        tmp_path,
        STUDY,
        {**ONE, "optim": {"lr": 2.0e-5, "schedule": "linear"}, "output_dir": str(tmp_path / "runs/lin")},
        name="lin.yaml",
    )
    R.run_study(E.load_study(lin), train_fn=FakeTrain(), console=_console())
    with pytest.raises(VariantError, match=r"budget.steps grew \(3 -> 5\) but optim.schedule is 'linear'"):
        R.run_study(E.load_study(lin, overrides={"budget.steps": 5}), train_fn=FakeTrain(), console=_console())


@pytest.mark.e2e
def test_added_seed_with_more_steps_does_not_mix_arms_of_different_lengths(tmp_path):
    from zoo.run import fingerprint
    from zoo.study import report

    path = _write(tmp_path, STUDY, ONE)
    R.run_study(E.load_study(path), train_fn=FakeTrain(), console=_console())
    train = FakeTrain()
    st = E.load_study(path, overrides={"seeds": [0, 1], "budget.steps": 5})
    assert R.run_study(st, train_fn=train, console=_console()) == 0
    assert train.calls == [("grpo-s0", True), ("grpo-s1", True)]  # s0 continued to 5, s1 trained to 5
    root = tmp_path / "runs/demo"
    fields = {d: fingerprint.read_record(root / d) for d in ("grpo-s0", "grpo-s1")}
    assert {f["budget"]["steps"] for f in fields.values()} == {5}
    assert fingerprint.mixed_keys(fields) == []
    # seeds recorded with different configs are never averaged
    fingerprint.write_record(
        root / "grpo-s1",
        E.expand_arms(E.load_study(path, overrides={"seeds": [1], "budget.steps": 5, "optim.lr": 0.1}))[0].config,
    )
    with pytest.raises(report.ReportError, match=r"arm grpo: .*grpo-s0, grpo-s1.*\(optim.lr\).*not averaged"):
        report.write_report(root)


@pytest.mark.e2e
def test_fresh_arm_retrains_only_that_arm(tmp_path):
    path = _write(tmp_path, STUDY)
    R.run_study(E.load_study(path), train_fn=FakeTrain(), console=_console())
    changed = {"ablations": {"dapo-no-clip-higher": {"variant": "dapo", "set": {"clip": "ppo", "clip.eps": 0.3}}}}
    path = _write(tmp_path, STUDY, changed)
    with pytest.raises(VariantError) as e:
        R.run_study(E.load_study(path), train_fn=FakeTrain(), console=_console())
    lines = str(e.value).splitlines()
    assert len(lines) == 2 and all("variant.slots.clip.eps: 0.2 -> 0.3" in x for x in lines)
    assert "dapo-no-clip-higher-s0" in lines[0] and "dapo-no-clip-higher-s1" in lines[1]
    with pytest.raises(VariantError, match=r"--fresh nope: no such arm .*dapo-no-clip-higher-s0"):
        R.run_study(E.load_study(path), train_fn=FakeTrain(), console=_console(), fresh=("nope",))
    train = FakeTrain()
    assert R.run_study(E.load_study(path), train_fn=train, console=_console(), fresh=("dapo-no-clip-higher",)) == 0
    assert sorted(c[0] for c in train.calls) == ["dapo-no-clip-higher-s0", "dapo-no-clip-higher-s1"]
    assert _records(tmp_path / "runs/demo/dapo-no-clip-higher-s0") == [0, 1, 2]  # old records deleted


@pytest.mark.e2e
def test_two_concurrent_studies_train_each_arm_once(tmp_path, monkeypatch):
    import threading
    import time

    import transformers  # noqa: F401  (two threads importing it at once can half-import it: "cannot import AutoConfig")

    from zoo.study import report

    monkeypatch.setattr(report, "write_report", lambda d, console=None, **kw: d / "report.md")  # matplotlib: one thread
    path = _write(tmp_path, STUDY, {"ablations": {}})

    class Slow(FakeTrain):
        def __call__(self, cfg, resume=True):
            time.sleep(0.3)
            return super().__call__(cfg, resume)

    trains, consoles = [Slow(), Slow()], [_console(), _console()]
    threads = [
        threading.Thread(target=R.run_study, args=(E.load_study(path),), kwargs={"train_fn": t, "console": c})
        for t, c in zip(trains, consoles)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    labels = sorted(c[0] for t in trains for c in t.calls)
    assert labels == ["dapo-s0", "dapo-s1", "grpo-s0", "grpo-s1"]  # every arm trained once, by one of them
    root = tmp_path / "runs/demo"
    for label in labels:
        assert _records(root / label) == [0, 1, 2]
    out = consoles[0].file.getvalue() + consoles[1].file.getvalue()
    assert "in use by pid" in out  # both start on the same first arm: one of them is told it is taken
    assert {a["status"] for a in json.loads((root / "study.json").read_text())["arms"]} == {"finished"}


def test_cli_ablate_rerun_prints_changed_keys_and_fresh_retrains(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import zoo.cli.run  # noqa: F401  (registers `zoo ablate`)
    from zoo.cli import app
    from zoo.run import trainer

    train = FakeTrain()
    monkeypatch.setattr(trainer, "train", train)
    path = _write(tmp_path, STUDY, ONE)
    runner = CliRunner()
    assert runner.invoke(app, ["ablate", str(path)]).exit_code == 0
    r = runner.invoke(app, ["ablate", str(path), "--set", "optim.lr=0.5"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    text = " ".join(r.output.split())  # rich wraps long lines
    assert "optim.lr: 2e-05 -> 0.5" in text and f"zoo ablate {path} --fresh grpo-s0" in text
    assert train.calls == [("grpo-s0", True)]
    r = runner.invoke(app, ["ablate", str(path), "--set", "optim.lr=0.5", "--fresh", "grpo-s0"])
    assert r.exit_code == 0, r.output
    assert train.calls == [("grpo-s0", True)] * 2
    rec = json.loads((tmp_path / "runs/demo/grpo-s0/fingerprint.json").read_text())
    assert rec["fields"]["optim"]["lr"] == 0.5


def test_ctrl_c_records_the_arm_interrupted_in_study_json_and_a_rerun_resumes_it(tmp_path):
    """Item 13: Ctrl-C during an arm (here while it loads, before the trainer writes anything) leaves
    study.json saying `interrupted` for that arm, not `pending`; the arms after it stay pending."""
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["grpo"], "ablations": {}, "seeds": [0, 1, 2]}))
    root = tmp_path / "runs" / "demo"
    done = FakeTrain()

    def train(cfg, resume=True):
        if cfg.name == "grpo-s1":
            raise KeyboardInterrupt
        return done(cfg, resume)

    with pytest.raises(KeyboardInterrupt):
        R.run_study(st, train_fn=train, console=_console())
    index = json.loads((root / "study.json").read_text())
    assert {a["label"]: a["status"] for a in index["arms"]} == {
        "grpo-s0": "finished",
        "grpo-s1": "interrupted",
        "grpo-s2": "pending",
    }
    assert R.arm_status(root / "grpo-s1") == ("interrupted", "KeyboardInterrupt: ")

    again = FakeTrain()
    assert R.run_study(st, train_fn=again, console=_console()) == 0
    assert again.calls == [("grpo-s1", True), ("grpo-s2", True)]
    assert {a["status"] for a in json.loads((root / "study.json").read_text())["arms"]} == {"finished"}


# --------------------------------------------------------------------------- silent acceptance, unclear errors


def test_sweep_points_equal_once_read_as_numbers_are_rejected(tmp_path):
    # PyYAML reads 1e-3 as a string and 1.0e-3 as a float; both are 0.001 to the schema
    p = tmp_path / "s.yaml"
    p.write_text("variants: [grpo]\nsweep: {optim.lr: [1e-3, 1.0e-3]}\n")
    assert yaml.safe_load(p.read_text())["sweep"]["optim.lr"] == ["1e-3", 0.001]
    with pytest.raises(VariantError) as e:
        E.expand_arms(E.load_study(p))
    assert "key 'sweep': points that give the same arm twice (grpo-optim.lr=1e-3-s0 = grpo-optim.lr=0.001-s0)" in str(
        e.value
    )
    p.write_text("variants: [grpo]\nsweep: {clip.eps_high: [2e-1, 0.2]}\n")  # a variant override: the same
    with pytest.raises(VariantError, match="same arm twice"):
        E.expand_arms(E.load_study(p))
    p.write_text("variants: [grpo]\nsweep: {optim.lr: [1e-3, 2.0e-3]}\n")
    assert [a.config.optim.lr for a in E.expand_arms(E.load_study(p))] == [0.001, 0.002]


def test_sweep_over_seed_says_use_seeds(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("variants: [grpo]\nsweep: {seed: [0, 1]}\n")
    with pytest.raises(VariantError) as e:
        E.load_study(p)
    msg = str(e.value)
    assert "key 'sweep.seed': 'seed' is given per arm by `seeds`: write `seeds: [0, 1, 2]`" in msg
    assert "did you mean" not in msg


def test_ablation_group_size_under_a_budget_group_size_warns(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY, {"ablations": {"small": {"variant": "grpo", "set": {"group_size": 3}}}}))
    rep = VAL.check_arms(E.expand_arms(st))
    warned = [w for w in rep.warnings if "is ignored" in w]
    assert warned and all(w.startswith("arm small") for w in warned)
    assert "set.group_size = 3 is ignored: budget.group_size = 4 wins over the variant" in warned[0]
    # so the arm trains what grpo trains: refused, naming both (issue 37 §3)
    assert any(e.startswith("arms grpo and small resolve to the same configuration (seeds 0, 1;") for e in rep.errors)


def test_ref_reset_every_with_kl_none_warns(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["dapo"], "ablations": {}, "ref_reset_every": 2}))
    rep = VAL.check_arms(E.expand_arms(st))
    assert any("ref_reset_every = 2 has no effect: variant 'dapo' has kl: none" in w for w in rep.warnings)


def test_a_symlinked_arm_of_another_study_is_refused_and_left_out_of_the_report(tmp_path, caplog):
    from zoo.study import report

    other = E.load_study(
        _write(
            tmp_path,
            STUDY,
            {
                "variants": ["grpo"],
                "ablations": {},
                "seeds": [0],
                "name": "other",
                "output_dir": str(tmp_path / "runs/other"),
            },
        )
    )
    assert R.run_study(other, train_fn=FakeTrain(), console=_console()) == 0
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["grpo", "dapo"], "ablations": {}, "seeds": [0]}))
    root = tmp_path / "runs" / "demo"
    root.mkdir(parents=True)
    (root / "grpo-s0").symlink_to(tmp_path / "runs/other/grpo-s0")
    train = FakeTrain()
    with pytest.raises(VariantError, match="grpo-s0 links to .*runs/other/grpo-s0, outside this study's folder"):
        R.run_study(st, train_fn=train, console=_console())
    assert train.calls == []  # not skipped as "finished", not run
    (root / "dapo-s0").mkdir()
    (root / "dapo-s0" / "metrics.jsonl").write_text("")
    with caplog.at_level("WARNING", logger="zoo.study.report.runs"):
        assert [r.label for r in report.discover(root)] == ["dapo-s0"]
    assert "left out" in caplog.text and "grpo-s0 links to" in caplog.text


def test_an_arm_folder_written_by_another_study_is_refused(tmp_path):
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["grpo"], "ablations": {}, "seeds": [0]}))
    d = tmp_path / "runs" / "demo" / "grpo-s0"
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("study: someone-else\n")
    with pytest.raises(VariantError, match="written by study 'someone-else', not 'demo'"):
        R.run_study(st, train_fn=FakeTrain(), console=_console())


def test_ctrl_c_keeps_the_fresh_arms_not_reached_in_the_resume(tmp_path):
    """`--fresh grpo` over 3 seeds, interrupted in seed 1: seed 0 was retrained, seed 1 resumes from its
    new checkpoint, but seed 2 still holds its old results, so the resume must still say --fresh for it."""
    st = E.load_study(_write(tmp_path, STUDY, {"variants": ["grpo"], "ablations": {}, "seeds": [0, 1, 2]}))
    done = FakeTrain()

    def train(cfg, resume=True):
        if cfg.name == "grpo-s1":
            raise KeyboardInterrupt
        return done(cfg, resume)

    with pytest.raises(KeyboardInterrupt) as e:
        R.run_study(st, train_fn=train, console=_console(), fresh=("grpo",))
    assert e.value.pending_fresh == ["grpo-s2"]


def test_the_dry_run_plan_says_what_a_run_would_do_with_finished_arms(tmp_path):
    path = _write(tmp_path, STUDY, ONE)
    R.run_study(E.load_study(path), train_fn=FakeTrain(), console=_console())

    def status(overrides=None, fresh=()):
        con = _console()
        st = E.load_study(path, overrides=overrides or {})
        assert R.run_study(st, dry_run=True, train_fn=FakeTrain(), console=con, fresh=fresh) == 0
        row = next(line for line in con.file.getvalue().splitlines() if "grpo-s0" in line and "│" in line)
        return row.split("│")[-2].strip()

    assert status() == "finished"  # the same config: skipped
    assert status({"budget.steps": 5}) == "finished: continues to step 5"  # was shown as plain "finished"
    assert status({"optim.lr": 0.5}) == "finished: config changed, would refuse"
    assert status({"optim.lr": 0.5}, fresh=("grpo-s0",)) == "finished: retrained (--fresh)"
