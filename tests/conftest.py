"""Test-wide settings: nothing may reach the network, W&B stays offline, one CPU thread whose OpenMP
runtime sleeps when idle (OMP_WAIT_POLICY=PASSIVE), chosen before torch is imported (zoo.run.threads).

Layout: tests/ has one folder per concern (mostly mirroring the zoo packages) and no `__init__.py`;
pytest imports each test file by its base name (its default `prepend` import mode), so base names
are unique across folders (checked below). Every folder is on sys.path, so a test imports shared
helpers by module name wherever they live (`from conftest import tiny_run_config`,
`from test_engine import make_batch`, `from dist_worker import build_case`), and the torchrun
workers get the same folders on PYTHONPATH (`launch_two_ranks`)."""

import contextlib
import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/; its parent is the repository root
ROOT = TESTS.parent
TEST_DIRS = [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name[0] not in "._")]
for _d in TEST_DIRS:
    if str(_d) not in sys.path:
        sys.path.append(str(_d))


def _duplicate_base_names() -> list[str]:
    seen: dict[str, Path] = {}
    dups = []
    for f in sorted(TESTS.rglob("*.py")):
        if f.name in seen and f.name != "__init__.py":
            dups.append(f"{seen[f.name].relative_to(TESTS)} and {f.relative_to(TESTS)}")
        seen.setdefault(f.name, f)
    return dups


if _duplicate_base_names():
    raise RuntimeError(
        "tests/: two files share a base name (modules are imported by base name; rename one): "
        + "; ".join(_duplicate_base_names())
    )

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# pytest-xdist's workers set COLUMNS=80 and LINES=24: without them a worker writes tables as a plain run
# to a pipe does (zoo.cli.common: full width), so `-n` and a plain run assert the same text
for _key in ("COLUMNS", "LINES"):
    os.environ.pop(_key, None)
# Before torch loads: one thread (subprocesses inherit it unless a test passes --threads) and PASSIVE
# waiting, so a busy machine (other jobs, two test runs at once) does not make OpenMP spin; the
# process holds a zoo.run.threads lease, so zoo runs started beside the suite count its thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # not by load: the suite often runs beside other jobs
from zoo.run import threads as _zoo_threads  # noqa: E402  (stdlib only: does not import torch)

_zoo_threads.apply(argv=[])

import torch  # noqa: E402

torch.set_num_threads(1)  # tiny models: 1 thread is faster and immune to a busy machine

import pytest  # noqa: E402

from zoo.step.hooks import Hooks  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread; with two, OpenMP's spin-waiting makes a step 3-60x
    slower whenever the machine is busy (measured: 0.3 s vs 0.8-19 s for a 2-step run)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama + character tokenizer saved as a local HF checkpoint (loads like any model)."""
    from zoo.models.tiny import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer(seed=0)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def tiny_run_config(model_dir, out_dir, variant="grpo", **over):
    """A RunConfig for a 2-step run of `variant` on the tiny model (seconds)."""
    from zoo.config.run import RunConfig

    data = {
        "name": f"tiny-{variant}",
        "variant": variant,
        "model": str(model_dir),
        "task": {
            "name": "reasoning_gym",
            "dataset": "basic_arithmetic",
            "size": 32,
            "eval_size": 4,
            "fewshot": 0,
            "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        },
        "rewards": ["correctness", {"name": "length", "weight": 0.5, "scale": 10.0}],
        "budget": {"steps": 2, "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 8, "micro_batch": 4},
        "optim": {"lr": 1e-3},
        "model_opts": {"autocast": "none"},  # not `auto`: the same numbers on every machine
        "eval": {"size": 2, "samples": 2},
        "tracking": {"wandb": False},
        "output_dir": str(out_dir),
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    return RunConfig.model_validate(data)


def gloo_unavailable() -> str | None:
    """Why two gloo processes cannot run here (no torch.distributed / gloo, or no localhost sockets),
    or None when they can: the distributed tests skip with this reason."""
    import socket

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        return "torch.distributed with gloo is not available"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
    except OSError as e:
        return f"no localhost sockets: {e}"
    return None


_CURRENT: dict = {}  # the test being set up or run: launch_two_ranks checks that it is marked `dist`


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _CURRENT["item"] = item  # before its fixtures, which may start torchrun for a whole module


def launch_two_ranks(script, *args: str, timeout: float = 120):
    """`torchrun --standalone --nproc_per_node 2 SCRIPT ARGS` from the repository root: one OpenMP
    thread per rank, the repository and every folder of tests/ importable, offline, no inherited ZOO_FAIL_AT_STEP.
    Returns the CompletedProcess (output captured); raises subprocess.TimeoutExpired after `timeout` s,
    and RuntimeError (before starting anything) when the running test is not marked `dist`."""
    import subprocess
    import sys

    item = _CURRENT.get("item")
    if item is not None and item.get_closest_marker("dist") is None:
        raise RuntimeError(
            f"{item.nodeid} starts torchrun: mark it @pytest.mark.dist (the unit lane "
            "-m 'not dist and not e2e and not slow' must not start processes)"
        )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(map(str, [ROOT, *TEST_DIRS])),
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("ZOO_FAIL_AT_STEP", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script), *args]
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def run_two_ranks(script, *args: str, timeout: float = 120):
    """`launch_two_ranks`, skipping the test where gloo cannot run here or the ranks outlast `timeout`,
    and failing it with the output's tail on a non-zero exit."""
    import subprocess

    why = gloo_unavailable()
    if why:
        pytest.skip(why)
    try:
        proc = launch_two_ranks(script, *args, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.skip("two gloo processes did not finish in time on this machine")
    if proc.returncode != 0:
        pytest.fail(f"torchrun failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    return proc


class ForwardRows(Hooks):
    """Step hooks that record (role, rows) of every model forward."""

    def __init__(self):
        self.rows: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def forward(self, role, mb):
        self.rows.append((role, mb.size))
        yield
