"""A step whose completions exceed the ceiling is refused before any model loads (issue 37 §2): the
check runs on the config alone; `zoo run` says it in one line, no traceback, nothing loaded."""

import subprocess
import sys

import yaml
from conftest import tiny_run_config

from zoo import checks
from zoo.checks.fit import MAX_COMPLETIONS


def test_a_million_prompts_is_refused_by_the_before_load_check(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path, budget={"prompts_per_step": 1_000_000})
    rep, _ = checks.before_load(cfg)
    (err,) = [e for e in rep.errors if "ceiling" in e]
    assert err.startswith("budget: 1000000 prompts x group_size 4 = 4000000 completions per step, more than the ")
    assert f"ceiling of {MAX_COMPLETIONS}" in err and err.endswith("lower budget.prompts_per_step or budget.group_size")
    ok = tiny_run_config(tiny_model_dir, tmp_path, budget={"prompts_per_step": MAX_COMPLETIONS // 4})
    assert not [e for e in checks.before_load(ok)[0].errors if "ceiling" in e]


def test_zoo_run_refuses_it_before_loading_the_model(tiny_model_dir, tmp_path):
    cfg = tiny_run_config(tiny_model_dir, tmp_path / "r", budget={"prompts_per_step": 1_000_000})
    data = cfg.model_dump(mode="json", exclude_none=True)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(data))
    code = (
        "import sys, zoo.models as m\n"
        "def no(*a, **k): raise SystemExit('the model must not load')\n"
        "m.load_policy = no\n"
        "from zoo.cli.entry import main\nsys.argv = ['zoo', 'run', sys.argv[1]]\nmain()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run.yaml")], capture_output=True, text=True, timeout=120
    )
    text = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0 and "Traceback" not in text and "must not load" not in text, text
    assert "4000000 completions per step, more than the ceiling of 1000000" in text
