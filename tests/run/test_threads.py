"""zoo.run.threads: the thread count and OpenMP wait policy chosen before torch loads (fake CPUs, quotas
and leases), and what a `zoo` subprocess ends up with."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zoo.run import threads as T

ROOT = Path(__file__).resolve().parents[2]


def test_cgroup_quota_files_parse_to_cpus():
    assert T.parse_cpu_max("250000 100000\n") == 2.5
    assert T.parse_cpu_max("max 100000\n") is None  # no quota
    assert T.parse_cfs("150000\n", "100000\n") == 1.5
    assert T.parse_cfs("-1\n", "100000\n") is None


def test_cgroup_v2_takes_the_tightest_limit_of_the_cgroup_and_its_ancestors():
    files = {
        "/sys/fs/cgroup/a/b/cpu.max": "max 100000",
        "/sys/fs/cgroup/a/cpu.max": "300000 100000",
        "/sys/fs/cgroup/cpu.max": "max 100000",
    }
    assert T.cgroup_cpus("0::/a/b\n", files.get) == 3.0
    files["/sys/fs/cgroup/a/b/cpu.max"] = "50000 100000"
    assert T.cgroup_cpus("0::/a/b\n", files.get) == 0.5


def test_cgroup_v1_cpu_controller_and_no_quota():
    files = {
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "200000",
        "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000",
    }
    assert T.cgroup_cpus("4:cpu,cpuacct:/job\n3:memory:/job\n", files.get) == 2.0
    assert T.cgroup_cpus("4:cpu,cpuacct:/job\n", {}.get) is None
    assert T.cgroup_cpus("", files.get) is None


def test_usable_cpus_is_affinity_capped_by_the_whole_quota_and_at_least_one():
    assert T.usable_cpus(8, None) == 8
    assert T.usable_cpus(8, 2.5) == 2  # 2.5 CPUs of quota: 2 threads run without throttling
    assert T.usable_cpus(2, 6.0) == 2
    assert T.usable_cpus(4, 0.5) == 1


@pytest.mark.parametrize(
    "argv,want",
    [
        (["run", "r.yaml", "--threads", "3"], 3),
        (["bench", "--threads=2"], 2),
        (["run", "--threads", "x"], None),
        (["run", "--threads"], None),
        (["run", "--threads", "0"], None),
        (["run", "r.yaml"], None),
    ],
)
def test_threads_flag_read_from_argv(argv, want):
    assert T.threads_from_argv(argv) == want


def test_auto_is_usable_cpus_minus_other_zoo_processes_leases():
    c = T.choose(affinity=8, quota=None, held={}, env={})
    assert (c.threads, c.source, c.wait_policy, c.policy_source) == (8, "auto", "PASSIVE", "zoo default")
    c = T.choose(affinity=8, quota=6.0, held={101: 2, 102: 1}, env={})
    assert c.threads == 3 and "6 usable CPUs" in c.why and "3 held by other zoo processes" in c.why
    assert T.choose(affinity=2, quota=None, held={101: 2}, env={}).threads == 1  # never 0


def test_threads_flag_then_user_omp_num_threads_win_over_auto():
    env = {"OMP_NUM_THREADS": "3"}
    assert T.choose(affinity=2, quota=None, held={1: 2}, env=env, argv_threads=5).threads == 5
    c = T.choose(affinity=2, quota=None, held={1: 2}, env=env)
    assert (c.threads, c.source) == (3, "OMP_NUM_THREADS")
    assert T.choose(affinity=4, quota=None, held={}, env={"OMP_NUM_THREADS": "2,1"}).threads == 2  # nested levels
    assert T.choose(affinity=4, quota=None, held={}, env={"OMP_NUM_THREADS": "many"}).source == "auto"


def test_omp_num_threads_inherited_from_a_zoo_parent_is_chosen_again():
    env = {"OMP_NUM_THREADS": "2", T.ENV_CHOSEN: "2"}
    c = T.choose(affinity=4, quota=None, held={7: 2}, env=env)
    assert (c.threads, c.source) == (2, "auto")  # 4 usable - the parent's 2


def test_user_wait_policy_is_kept():
    c = T.choose(affinity=2, quota=None, held={}, env={"OMP_WAIT_POLICY": "active"})
    assert (c.wait_policy, c.policy_source) == ("ACTIVE", "user")
    inherited = {"OMP_WAIT_POLICY": "PASSIVE", T.ENV_POLICY_CHOSEN: "PASSIVE"}  # a zoo parent's, e.g. torchrun ranks
    assert T.choose(affinity=2, quota=None, held={}, env=inherited).policy_source == "zoo default"


def test_torchrun_ranks_share_the_usable_cpus():
    env = {"LOCAL_WORLD_SIZE": "2"}
    first = T.choose(affinity=4, quota=None, held={}, env=env)
    second = T.choose(affinity=4, quota=None, held={9: first.threads}, env=env)
    assert (first.threads, second.threads) == (2, 2)
    assert T.choose(affinity=2, quota=None, held={}, env={"LOCAL_WORLD_SIZE": "4"}).threads == 1


def test_stale_and_malformed_leases_are_removed_live_ones_counted(tmp_path):
    (tmp_path / "10.lease").write_text("10 2 555\n")  # alive, same start time: counted
    (tmp_path / "11.lease").write_text("11 1 555\n")  # dead pid
    (tmp_path / "12.lease").write_text("12 3 777\n")  # pid reused by another process (other start time)
    (tmp_path / "13.lease").write_text("garbage\n")
    (tmp_path / "14.lease").write_text("14 1 -\n")  # start time unknown: alive is enough
    (tmp_path / "99.lease").write_text("99 4 555\n")  # this process's own: not counted, kept
    held = T.live_leases(tmp_path, self_pid=99, alive=lambda pid: pid != 11, started=lambda pid: "555")
    assert held == {10: 2, 14: 1}
    assert sorted(p.name for p in tmp_path.glob("*.lease")) == ["10.lease", "14.lease", "99.lease"]


def test_importing_zoo_does_not_import_torch():
    code = "import sys, zoo, zoo.run.threads; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "False"


def _clean_env(tmp_path, **extra):
    drop = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", T.ENV_CHOSEN, T.ENV_POLICY_CHOSEN)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PYTHONPATH": str(ROOT), T.ENV_DIR: str(tmp_path / "leases"), **extra}


def test_zoo_cli_import_sets_passive_and_the_threads_before_torch(tmp_path):
    """What `python -m zoo.cli` and the console script import first (zoo.cli): with one live lease of
    1 thread held by this test process, the child gets max(1, usable - 1) threads and PASSIVE."""
    d = tmp_path / "leases"
    d.mkdir()
    me = os.getpid()
    (d / f"{me}.lease").write_text(f"{me} 1 {T.start_time(me) or '-'}\n")
    usable = T.usable_cpus(
        T.affinity_cpus(),
        T.cgroup_cpus(Path("/proc/self/cgroup").read_text() if Path("/proc/self/cgroup").exists() else ""),
    )
    code = (
        "import os, zoo.cli, torch, zoo.run.threads as T; "
        "print(os.environ['OMP_WAIT_POLICY'], torch.get_num_threads(), T.current().source)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_clean_env(tmp_path), capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["PASSIVE", str(max(1, usable - 1)), "auto"]
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_clean_env(tmp_path, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="ACTIVE"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["ACTIVE", "1", "OMP_NUM_THREADS"]  # the user's settings win
    assert sorted(p.name for p in d.glob("*.lease")) == [f"{me}.lease"]  # the children's leases went at exit


@pytest.mark.e2e
def test_zoo_run_subprocess_logs_the_choice_and_records_it(tmp_path, tiny_model_dir):
    """`python -m zoo.cli run` with --threads 2 beside another zoo process (a lease of this test's): one
    stderr line, PASSIVE by load, torch on 2 threads, and the same in the run's provenance."""
    import yaml
    from conftest import tiny_run_config

    d = tmp_path / "leases"
    d.mkdir()
    me = os.getpid()
    (d / f"{me}.lease").write_text(f"{me} 1 {T.start_time(me) or '-'}\n")
    cfg = tiny_run_config(tiny_model_dir, tmp_path / "run", budget={"steps": 1})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    proc = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "run", str(path), "--threads", "2"],
        env=_clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("threads: ")]
    busy = "zoo default, busy: 1 threads held by other zoo processes"
    assert lines == [f"threads: 2 (--threads: --threads 2); OMP_WAIT_POLICY=PASSIVE ({busy})"]
    prov = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["provenance"]
    assert prov["torch_threads"] == 2
    assert prov["threads"] == {
        "threads": 2,
        "wait_policy": "PASSIVE",
        "source": "--threads",
        "why": "--threads 2",
        "policy_source": busy,
    }


@pytest.mark.parametrize(
    ("load", "held", "local", "policy", "why"),
    [
        (0.0, 0, 1, "default", "idle: 0 other runnable threads"),
        (1.0, 0, 1, "PASSIVE", "busy: 1 other runnable threads"),  # one CPU-bound process beside it
        (0.0, 1, 1, "PASSIVE", "busy: 1 threads held"),
        (0.0, 0, 2, "PASSIVE", "busy: 2 torchrun ranks"),
        (None, 0, 1, "PASSIVE", "load unknown"),
    ],
)
def test_the_wait_policy_goes_by_load(load, held, local, policy, why):
    """Idle machine and no other zoo process: OpenMP's default (measured 1.6x faster than PASSIVE at the
    main job's size); any sign of another job: PASSIVE (docs/results/performance-threads.md)."""
    env = {"LOCAL_WORLD_SIZE": str(local)}
    c = T.choose(affinity=2, quota=None, held={99: held} if held else {}, env=env, load=load)
    assert c.wait_policy == policy and why in c.policy_source, c
    assert c.policy_source.startswith("zoo default")
    user = T.choose(affinity=2, quota=None, held={}, env={"OMP_WAIT_POLICY": "active"}, load=load)
    assert (user.wait_policy, user.policy_source) == ("ACTIVE", "user")  # the user's setting always wins


def test_apply_leaves_the_variable_unset_on_an_idle_machine(tmp_path, monkeypatch):
    """The idle choice removes a wait policy a zoo parent set (not the user's) and sets none."""
    monkeypatch.setattr(T, "_load", lambda: 0.0)
    monkeypatch.setattr(T, "_CHOICE", None)
    monkeypatch.setattr(T, "_LEASE", None)
    env = {T.ENV_DIR: str(tmp_path / "leases"), "OMP_WAIT_POLICY": "PASSIVE", T.ENV_POLICY_CHOSEN: "PASSIVE"}
    c = T.apply(argv=["--threads", "1"], env=env)  # 1: torch is imported here, and apply sets its threads
    T.release()
    assert c.wait_policy == "default" and "OMP_WAIT_POLICY" not in env and T.ENV_POLICY_CHOSEN not in env
    assert "OMP_WAIT_POLICY unset" in c.line()


def test_the_load_is_the_runnable_count_of_proc_loadavg_minus_this_thread(monkeypatch):
    """/proc/loadavg's 4th field "running/total" counts this thread too; the median of the reads wins."""
    reads = iter(["0.90 1.00 1.20 3/99 1", "0.90 1.00 1.20 1/99 1", "0.90 1.00 1.20 3/99 1"])
    monkeypatch.setattr(T, "_read", lambda path: next(reads) if path == "/proc/loadavg" else None)
    assert T._load(samples=3) == 2.0  # median of 2, 0, 2 other runnable threads
    monkeypatch.setattr(T, "_read", lambda path: None)  # no /proc: the 1-minute load average
    monkeypatch.setattr(T.os, "getloadavg", lambda: (0.25, 0.5, 0.75))
    assert T._load(samples=2) == 0.25


def test_threads_beyond_the_usable_cpus_are_warned():  # issue 37 §6
    c = T.choose(affinity=2, quota=None, held={}, env={}, argv_threads=999)
    assert c.threads == 999 and "warning: --threads 999 is more than the 2 usable CPUs" in c.line()
    assert "use 2 or fewer" in c.line()
    c = T.choose(affinity=4, quota=2.0, held={}, env={"OMP_NUM_THREADS": "8"})
    assert "warning: OMP_NUM_THREADS 8 is more than the 2 usable CPUs" in c.line()
    assert "warning" not in T.choose(affinity=2, quota=None, held={}, env={}, argv_threads=2).line()
