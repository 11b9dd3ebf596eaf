"""`zoo ablate --ray`: a tiny-model study of 4 arms through a local Ray (num_cpus=2, one thread per arm)
gives the per-arm metrics of the sequential run (one thread too), and an arm that raises is recorded
failed while the others finish; a re-run skips the finished arms. One module, one Ray start: the
fixture starts Ray as `run_arms_on_ray` would (zoo on the workers' PYTHONPATH), and the runner joins it."""

import json
import os
from functools import partial
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from zoo.config.variant import VariantError
from zoo.study import experiment, ray_runner, runner
from zoo.study.experiment import Resources

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    root = str(Path(ray_runner.__file__).resolve().parents[2])
    ray.init(
        num_cpus=2,
        num_gpus=0,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": root, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}},
    )
    yield
    ray.shutdown()


NOISE = ("time/", "perf/")  # wall-clock and memory: differ run to run, everything else must not


def _study(tmp_path, model_dir, name, failing_arm):
    data = {
        "name": name,
        "model": str(model_dir),
        "model_opts": {"autocast": "none"},
        "task": {
            "name": "reasoning_gym",
            "dataset": "basic_arithmetic",
            "size": 16,
            "eval_size": 2,
            "fewshot": 0,
            "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        },
        "rewards": ["correctness", {"name": "length", "scale": 10.0}],
        "budget": {"steps": 2, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 6, "micro_batch": 4},
        "optim": {"lr": 1e-3},
        "eval": {"size": 2, "samples": 1},
        "seeds": [0, 1],
        "variants": ["grpo", "dr_grpo"],
        "tracking": {"wandb": False},
        "output_dir": str(tmp_path / name),
    }
    if failing_arm:  # a bandit reward on reasoning_gym rows raises ValueError (no noise_seed) in the arm
        data["ablations"] = {
            "broken": {"variant": "grpo", "set": {"rewards": [{"name": "arm_bernoulli", "p": {"a": 0.5}}]}}
        }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return experiment.load_study(path)


def _metrics(d):
    recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(NOISE)} for r in recs]


@pytest.mark.e2e
def test_ray_arms_match_the_sequential_run_and_a_failure_is_recorded(tmp_path, tiny_model_dir, local_ray):
    quiet = Console(file=open(os.devnull, "w"))
    seq = _study(tmp_path, tiny_model_dir, "seq", failing_arm=False)
    assert runner.run_study(seq, console=quiet) == 0

    st = _study(tmp_path, tiny_model_dir, "onray", failing_arm=True)
    run_arms = partial(ray_runner.run_arms_on_ray, resources=Resources(cpus=1))
    code = runner.run_study(st, console=quiet, run_arms=run_arms)
    assert code == 1  # not every arm finished: the broken ones failed

    for label in ("grpo-s0", "grpo-s1", "dr_grpo-s0", "dr_grpo-s1"):
        a, b = tmp_path / "seq" / label, tmp_path / "onray" / label
        assert json.loads((b / "summary.json").read_text())["status"] == "finished"
        ma, mb = _metrics(a), _metrics(b)
        assert len(ma) == len(mb) >= 2
        assert ma == mb, label  # same seeds, one thread each: the same numbers, not just close ones
    index = {r["label"]: r for r in json.loads((tmp_path / "onray" / "study.json").read_text())["arms"]}
    for label in ("broken-s0", "broken-s1"):
        assert index[label]["status"] == "failed"
        assert index[label]["error"].startswith("ValueError") and "noise_seed" in index[label]["error"]
    assert (tmp_path / "onray" / "report.md").is_file()

    # a re-run through Ray skips the finished arms (same fingerprint): nothing is redone
    again = experiment.load_study(st.path, overrides={"ablations": {}})
    stamp = (tmp_path / "onray" / "grpo-s0" / "summary.json").stat().st_mtime_ns
    assert runner.run_study(again, console=quiet, run_arms=run_arms) == 0
    assert (tmp_path / "onray" / "grpo-s0" / "summary.json").stat().st_mtime_ns == stamp


def test_resources_default_and_too_large_a_request():
    assert ray_runner.arm_resources(Resources(), {"CPU": 16, "GPU": 2}, threads=None) == {
        "num_cpus": 1.0,
        "num_gpus": 1.0,
    }
    assert ray_runner.arm_resources(Resources(), {"CPU": 16}, threads=4) == {"num_cpus": 4.0, "num_gpus": 0.0}
    assert ray_runner.arm_resources(Resources(cpus=2, gpus=0), {"CPU": 16, "GPU": 8}, 4) == {
        "num_cpus": 2.0,
        "num_gpus": 0.0,
    }


def test_study_resources_key_is_checked(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "variants": ["grpo"], "resources": {"cpus": 0}}))
    with pytest.raises(VariantError, match="resources"):
        experiment.load_study(p)
    p.write_text(yaml.safe_dump({"name": "s", "variants": ["grpo"], "resources": {"gpu": 1}}))
    with pytest.raises(VariantError, match="gpu"):
        experiment.load_study(p)


def test_without_ray_the_flag_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(VariantError, match=r"pip install 'variant-zoo\[ray\]'"):
        ray_runner.import_ray()


@pytest.mark.parametrize(
    "args, address",
    [
        (["--ray"], None),
        (["--ray", "--ray-address", "auto"], "auto"),
        (["--ray-address", "ray://head:10001", "--threads", "2"], "ray://head:10001"),
    ],
)
def test_cli_ray_flag_and_address(tmp_path, monkeypatch, args, address):
    from typer.testing import CliRunner

    from zoo.cli import app
    from zoo.cli import main as _main  # noqa: F401  (registers the commands)

    seen = {}

    def fake_run_study(st, **kw):
        seen.update(kw["run_arms"].keywords)
        return 0

    monkeypatch.setattr(runner, "run_study", fake_run_study)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "variants": ["grpo"], "resources": {"cpus": 3}}))
    res = CliRunner().invoke(app, ["ablate", str(p), *args])
    assert res.exit_code == 0, res.output
    assert seen["address"] == address and seen["resources"] == Resources(cpus=3)
    assert seen["threads"] == (2 if "--threads" in args else None)


def test_a_local_ray_starts_its_workers_at_the_drivers_priority(monkeypatch):
    """Ray's workers default to niceness 15 (RayConfig worker_niceness): the local Ray zoo starts gets
    RAY_worker_niceness=0 in the environment the raylet inherits (checked by hand: a worker's os.nice(0)
    is 15 without it, 0 with it); a value the user set is kept."""

    class Stop(Exception):
        pass

    seen = []

    class FakeRay:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kwargs):
            seen.append(os.environ.get("RAY_worker_niceness"))
            raise Stop

    monkeypatch.setattr(ray_runner, "import_ray", lambda: FakeRay)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    with pytest.raises(Stop):
        ray_runner.run_arms_on_ray([], train_fn=None)
    monkeypatch.setenv("RAY_worker_niceness", "5")
    with pytest.raises(Stop):
        ray_runner.run_arms_on_ray([], train_fn=None)
    assert seen == ["0", "5"]


def test_arms_with_a_critic_are_handed_to_ray_first():
    """Longest first: ppo (a critic) before the critic-free arms, which keep their order."""
    from zoo.config.run import RunConfig
    from zoo.study.experiment import Arm

    arms = [Arm(f"{v}-s0", v, 0, {}, RunConfig.model_validate({"variant": v})) for v in ("dapo", "grpo", "ppo")]
    assert [a.label for a in ray_runner.longest_first(arms)] == ["ppo-s0", "dapo-s0", "grpo-s0"]
