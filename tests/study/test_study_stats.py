"""Acceptance: a 3-seed tiny-model study whose report holds IQM and 95% CI columns, recomputed
here by a second route from the arms' own files: numpy by hand for the IQM, the same fixed-seed scipy
bootstrap for the interval, the paired differences by seed for the comparison against the baseline."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from rich.console import Console
from scipy import stats as sps

from zoo.study import experiment, runner
from zoo.study.report.intervals import BOOTSTRAP_SEED, N_RESAMPLES

pytestmark = pytest.mark.e2e  # a 3-seed study through the real trainer


def _iqm_by_hand(v):
    x = np.sort(np.asarray(v, dtype=float))
    cut = int(0.25 * len(x))  # 3 seeds: nothing cut
    return float(x[cut : len(x) - cut].mean())


def _ci(data, statistic):
    ci = sps.bootstrap(
        data, statistic, n_resamples=N_RESAMPLES, method="percentile", rng=np.random.default_rng(BOOTSTRAP_SEED)
    ).confidence_interval
    return f"[{ci.low:.3f}, {ci.high:.3f}]†"  # 3 seeds: marked as an interval from fewer than 5


def _md_rows(md: str, first: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in md.splitlines()
        if line.startswith(f"| {first} |")
    ]


def test_three_seed_study_report_has_iqm_and_ci_columns_recomputed_by_hand(tmp_path, tiny_model_dir):
    data = {
        "name": "seeds3",
        "model": str(tiny_model_dir),
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
        "model_opts": {"autocast": "none"},
        "eval": {"enabled": False},
        "tracking": {"wandb": False},
        "seeds": [0, 1, 2],
        "variants": ["grpo", "dr_grpo"],
        "baseline": "dr_grpo",
        "output_dir": str(tmp_path / "runs" / "seeds3"),
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    assert runner.run_study(experiment.load_study(path), console=Console(file=open(os.devnull, "w"))) == 0
    root = tmp_path / "runs" / "seeds3"
    md = (root / "report.md").read_text()
    assert "| metric | arm | seeds | IQM | 95% CI |" in md

    finals = {
        arm: [json.loads((root / f"{arm}-s{s}" / "summary.json").read_text())["reward/total"] for s in range(3)]
        for arm in ("grpo", "dr_grpo")
    }
    rows = {r[1]: r for r in _md_rows(md, "final reward") if len(r) == 5}
    for arm, v in finals.items():
        assert rows[arm][2] == "3"
        assert rows[arm][3] == f"{_iqm_by_hand(v):.3f}"
        assert rows[arm][4] == _ci((np.asarray(v),), lambda x, axis: sps.trim_mean(x, 0.25, axis=axis))

    # grpo against the named baseline dr_grpo, paired by seed
    d = np.asarray(finals["grpo"]) - np.asarray(finals["dr_grpo"])
    comp = next(r for r in _md_rows(md, "final reward") if len(r) == 9)
    assert comp[1:4] == ["grpo", "dr_grpo", "3"]
    assert comp[4] == f"{d.mean():.3f}"
    assert comp[5] == _ci((d,), lambda x, axis: np.mean(x, axis=axis))

    # the same numbers for scripts
    rep = json.loads((root / "report.json").read_text())
    assert rep["baseline"] == "dr_grpo"
    st = next(s for s in rep["stats"] if s["metric"] == "final reward" and s["arm"] == "grpo")
    assert abs(st["estimate"]["iqm"] - _iqm_by_hand(finals["grpo"])) < 1e-12
    assert sorted(st["values"]) == ["0", "1", "2"]
    (root / "report.md").unlink()
    # `zoo report --json` prints the same statistics

    out = subprocess.run(
        [sys.executable, "-c", "from zoo.cli import main; main()", "report", str(root), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)["stats"] == rep["stats"] and (root / "report.md").exists()
    # diagnostics summarised: adv/corr/length is defined every step here; adv/corr/correctness is NaN
    # (undefined) while the random model is never right, and an all-NaN diagnostic gets no row
    assert any(s["metric"].startswith("adv/corr/length") for s in rep["stats"])
