"""`zoo ablate`'s closing console output: one table with one row per arm and the key columns, plus the
path of report.md; report.md itself is the same as `zoo report` writes (zoo.study.report.print_summary)."""

from __future__ import annotations

import io
import json

import pytest
import yaml
from rich.console import Console

from zoo.study import experiment as E
from zoo.study import report
from zoo.study import runner as R
from zoo.study.report.console_fit import fit_widths

STUDY = {
    "name": "demo",
    "budget": {
        "steps": 4,
        "prompts_per_step": 2,
        "max_new_tokens": 16,
        "group_size": 4,
        "updates": {"epochs": 1, "minibatches": 2},
    },
    "tracking": {"wandb": False},
    "seeds": [0],
    "variants": ["grpo", "dapo", "dr_grpo"],
}


def fake_train(cfg, resume=True):
    """reward/total 0.1 * step at steps 0..3 (+0.05 for dapo), 2 s a step, eval 0.25 -> 0.5; dr_grpo fails."""
    out = cfg.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    bonus = 0.05 if cfg.variant == "dapo" else 0.0
    recs = [{"step": s, "reward/total": 0.1 * s + bonus, "time/step": 2.0} for s in range(4)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    if cfg.variant == "dr_grpo":
        raise RuntimeError("boom in dr_grpo")
    summ = {"status": "finished", "eval/before": {"eval/greedy_acc": 0.25}, "eval/after": {"eval/greedy_acc": 0.5}}
    (out / "summary.json").write_text(json.dumps(summ))
    return summ


@pytest.fixture
def ran(tmp_path):
    p = tmp_path / "demo.yaml"
    p.write_text(yaml.safe_dump({**STUDY, "output_dir": str(tmp_path / "runs" / "demo")}))
    con = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    assert R.run_study(E.load_study(p), train_fn=fake_train, console=con) == 1  # dr_grpo failed
    return tmp_path / "runs" / "demo", con.file.getvalue()


def test_ablate_ends_with_one_row_per_arm_and_the_report_path(ran):
    root, out = ran
    end = out[out.index("study demo", out.index("run grpo-s0")) :]  # what follows the last arm's training
    assert "IQM" not in end and "against the baseline" not in end  # the statistics stay in report.md
    rows = {line.split()[0]: line.split() for line in end.splitlines() if line.split()[:1] in (["grpo"], ["dapo"])}
    # final reward 0.3 (+0.05); mean of steps 0-1 -> steps 2-3: 0.05 -> 0.25; eval 0.25 -> 0.5; 2 s/step
    assert rows["grpo"] == ["grpo", "0", "finished", "0.300", "0.050", "→", "0.250", "0.250", "→", "0.500", "2.00"]
    assert rows["dapo"][3:7] == ["0.350", "0.100", "→", "0.300"]
    assert sum(line.split()[:1] == ["dr_grpo"] for line in end.splitlines()) == 1  # its row, status failed
    assert "failed dr_grpo: RuntimeError: boom in dr_grpo" in end
    assert f"report: {root / 'report.md'}" in " ".join(end.split())
    assert len(end.splitlines()) <= 12  # title, header, rule, 3 rows, the error, the path, blanks


def test_report_md_is_what_zoo_report_writes(ran):
    root, _ = ran

    def body() -> str:  # report.md without its "generated <time>" stamp
        return "\n".join(x for x in (root / "report.md").read_text().splitlines() if "generated" not in x)

    after_ablate, json_after_ablate = body(), (root / "report.json").read_text()
    full = Console(file=io.StringIO(), width=100)
    report.write_report(root, console=full)
    assert body() == after_ablate and (root / "report.json").read_text() == json_after_ablate
    assert "IQM" in full.file.getvalue()  # `zoo report` still prints every table


def test_summary_never_cuts_a_cell_in_a_narrow_terminal(ran):
    root, _ = ran
    runs = report.discover(root)
    header, rows = report.table_rows(report.group_runs(runs), report.reward_keys(runs))
    for width in range(30, 101):
        con = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
        report.print_summary("demo", header, rows, con)
        text = con.file.getvalue()
        assert max(len(x) for x in text.splitlines()) <= width and "…" not in text, width
        for word in ("s/step", "0.300", "0.350", "finished", "dr_grpo", "0.500"):
            assert word in text.split(), (width, word)


def test_fit_widths():
    assert fit_widths([4, 10, 6], [4, 5, 3], 30) == [4, 10, 6]  # 20 + 3 x 3 gaps fit
    assert fit_widths([4, 10, 6], [4, 5, 3], 25) == [4, 6, 6]  # 16 for cells: the 6 whole, the 10 folds
    assert fit_widths([4, 10, 6], [4, 5, 3], 20) is None  # 11 < 12
