"""zoo.study.report: a fake study (2 arms x 2 seeds + a failed arm) -> report.md numbers, PNGs, terminal table."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from zoo.study import report
from zoo.study.report import plots, stats

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# per run: reward/total, reward/correctness, accuracy per step; time/step; peak memory per step;
# eval greedy accuracy before / after
RUNS = {
    "grpo-s0": dict(
        total=[0.1, 0.3, 0.5, 0.4],
        corr=[0.0, 0.25, 0.5, 0.5],
        acc=[0.0, 0.25, 0.5, 0.5],
        t=2.0,
        mem=[900, 1000, 950, 980],
        before=0.25,
        after=0.50,
    ),
    "grpo-s1": dict(
        total=[0.2, 0.2, 0.6, 0.7],
        corr=[0.25, 0.25, 0.5, 0.75],
        acc=[0.25, 0.25, 0.5, 0.75],
        t=3.0,
        mem=[1100, 1200, 1150, 1190],
        before=0.35,
        after=0.60,
    ),
    "dapo-s0": dict(
        total=[0.0, 0.1, 0.2, 0.3],
        corr=[0.0, 0.0, 0.25, 0.25],
        acc=[0.0, 0.0, 0.25, 0.25],
        t=1.0,
        mem=[500, 500, 500, 500],
        before=0.25,
        after=0.25,
    ),
    "dapo-s1": dict(
        total=[0.1, 0.3, 0.3, 0.5],
        corr=[0.0, 0.25, 0.25, 0.5],
        acc=[0.0, 0.25, 0.25, 0.5],
        t=1.5,
        mem=[600, 700, 650, 600],
        before=0.35,
        after=0.45,
    ),
}


def _write_run(d: Path, m: dict, variant: str, seed: int) -> None:
    d.mkdir(parents=True)
    recs = [{"step": -1, "eval/greedy_acc": m["before"], "eval/avg_at_k": 0.1}]
    elapsed = 0.0
    for s, (tot, corr, acc, mem) in enumerate(zip(m["total"], m["corr"], m["acc"], m["mem"])):
        elapsed += m["t"]
        recs.append(
            {
                "step": s,
                "reward/total": tot,
                "reward/correctness": corr,
                "accuracy": acc,
                "kl/ref": 0.01 * s,
                "entropy": 1.0 - 0.1 * s,
                "completion/len_mean": 20 + s,
                "clip/low_frac": 0.0,
                "clip/high_frac": 0.05,
                "count/completions": 8 * (s + 1),
                "count/tokens": 160 * (s + 1),
                "time/step": m["t"],
                "time/elapsed": elapsed,
                "perf/peak_mem_mb": mem,
                "loss/policy": 0.1,
            }
        )
    recs.append({"step": 3, "eval/greedy_acc": m["after"], "eval/avg_at_k": 0.2})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "status": "finished",
                "reward/total": m["total"][-1],
                "time/total_s": 4 * m["t"],
                "eval/before": {"eval/greedy_acc": m["before"], "eval/avg_at_k": 0.1},
                "eval/after": {"eval/greedy_acc": m["after"], "eval/avg_at_k": 0.2},
                "config": {
                    "variant": {"name": variant, "group_size": 4, "updates": {"epochs": 1, "minibatches": 2}},
                    "budget": {"max_new_tokens": 48},
                    "optim": {"lr": 3e-6},
                },
            }
        )
    )
    (d / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "name": d.name,
                "variant": variant,
                "seed": seed,
                "budget": {"steps": 4, "max_new_tokens": 48, "group_size": None},
                "optim": {"lr": 3e-6},
            }
        )
    )


@pytest.fixture
def study(tmp_path) -> Path:
    root = tmp_path / "runs" / "demo"
    for label, m in RUNS.items():
        _write_run(root / label, m, label.split("-")[0], int(label[-1]))
    bad = root / "ppo-s0"  # crashed before its first step: no metrics at all
    bad.mkdir()
    (bad / "summary.json").write_text(
        json.dumps({"status": "failed", "error": "RuntimeError: out of memory | boom\nmore"})
    )
    (bad / "config.yaml").write_text(yaml.safe_dump({"name": "ppo-s0", "variant": "ppo", "seed": 0}))
    (root / "study.json").write_text(
        json.dumps(
            {
                "name": "demo",
                "arms": [{"label": x} for x in ["grpo-s0", "grpo-s1", "dapo-s0", "dapo-s1", "ppo-s0", "rloo-s0"]],
            }
        )
    )
    return root


def _row(md: str, arm: str) -> list[str]:
    line = next(x for x in md.splitlines() if x.startswith(f"| {arm} |"))
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def test_report_numbers_are_mean_and_sample_std_over_seeds(study):
    con = Console(file=io.StringIO(), width=250, color_system=None)
    out = report.write_report(study, console=con)
    assert out == study / "report.md"
    md = out.read_text()
    header = _row(md, "arm")
    grpo = dict(zip(header, _row(md, "grpo")))
    # final reward/total: 0.4 and 0.7 -> mean 0.55, sample std sqrt(2 * 0.15^2 / 1) = 0.2121
    assert grpo["final reward"] == "0.550 ± 0.212"
    # best reward/total: 0.5 and 0.7 -> 0.6 ± sqrt(2 * 0.1^2) = 0.1414
    assert grpo["best reward"] == "0.600 ± 0.141"
    # halves of 4 steps: s0 (0.1+0.3)/2=0.2 -> (0.5+0.4)/2=0.45 ; s1 0.2 -> 0.65
    # -> 0.200 ± 0 -> 0.55 ± sqrt(2 * 0.1^2) = 0.1414
    assert grpo["mean reward 1st → 2nd half"] == "0.200 ± 0.000 → 0.550 ± 0.141"
    # final correctness 0.5, 0.75 -> 0.625 ± 0.1768 ; final accuracy the same
    assert grpo["final reward/correctness"] == "0.625 ± 0.177" and grpo["accuracy"] == "0.625 ± 0.177"
    # eval greedy: before 0.25, 0.35 -> 0.30 ± 0.0707 ; after 0.50, 0.60 -> 0.55 ± 0.0707
    assert grpo["eval greedy before → after"] == "0.300 ± 0.071 → 0.550 ± 0.071"
    # time/step 2.0 and 3.0 -> 2.50 ± 0.71 ; peak memory max 1000 and 1200 -> 1100 ± 141
    assert grpo["time/step (s)"] == "2.50 ± 0.71" and grpo["peak mem (MB)"] == "1100 ± 141"
    assert (grpo["seeds"], grpo["status"]) == ("0,1", "finished")
    # values used come from the trainer's resolved config
    assert (grpo["group_size"], grpo["updates"], grpo["lr"], grpo["max_new_tokens"]) == ("4", "1x2", "3e-06", "48")

    dapo = dict(zip(header, _row(md, "dapo")))
    # final 0.3, 0.5 -> 0.4 ± 0.1414 ; best the same ; time 1.0, 1.5 -> 1.25 ± 0.354 ; mem 500, 700 -> 600 ± 141
    assert (dapo["final reward"], dapo["best reward"]) == ("0.400 ± 0.141", "0.400 ± 0.141")
    assert dapo["time/step (s)"] == "1.25 ± 0.35" and dapo["peak mem (MB)"] == "600 ± 141"
    # before 0.25, 0.35 ; after 0.25, 0.45 -> 0.35 ± 0.1414
    assert dapo["eval greedy before → after"] == "0.300 ± 0.071 → 0.350 ± 0.141"

    ppo = dict(zip(header, _row(md, "ppo")))
    assert ppo["status"] == "failed: RuntimeError: out of memory \\| boom more"
    assert ppo["final reward"] == "-" and ppo["eval greedy before → after"] == "- → -"
    rloo = dict(zip(header, _row(md, "rloo")))  # listed in study.json, never started
    assert rloo["status"] == "pending"
    assert [a for a in (_row(md, x)[0] for x in ("grpo", "dapo", "ppo", "rloo"))] == ["grpo", "dapo", "ppo", "rloo"]

    term = con.file.getvalue()
    assert "0.550 ± 0.212" in term and "failed ppo: RuntimeError: out of memory | boom more" in term


def test_report_plots_exist_are_pngs_and_are_linked(study):
    md = report.write_report(study, console=Console(file=io.StringIO())).read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert set(links) == {
        "plots/reward_vs_step.png",
        "plots/reward_vs_completions.png",
        "plots/reward_vs_time.png",
        "plots/eval_accuracy.png",
        "plots/training_dynamics.png",
        "plots/training_dynamics_vs_completions.png",
        "plots/training_dynamics_vs_time.png",
    }
    # no diagnostics_*.png: these fake runs log no mechanism diagnostic (adv/corr/*, completion/len_correct, ...)
    for rel in links:
        data = (study / rel).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, rel
    import matplotlib.image as mpimg

    img = mpimg.imread(study / "plots" / "reward_vs_step.png")
    assert img.shape[0] > 200 and img.shape[1] > 500 and img.std() > 0.01  # drawn, not blank


def test_curves_average_seeds_against_cumulative_completions(study):
    groups = report.group_runs(report.discover(study))
    grpo = next(g for g in groups if g.name == "grpo")
    xs, ys, sd = plots._mean_curve(
        grpo.ok_runs, lambda r: r.series("reward/total"), lambda r: r.series("count/completions")
    )
    assert xs == [8, 16, 24, 32]
    assert ys == pytest.approx([0.15, 0.25, 0.55, 0.55])
    # band: the 95% t interval of the mean of 2 seeds (0.1, 0.2): t_{0.975, 1} = 12.7062, s = 0.0707107,
    # half width 12.7062 * 0.0707107 / sqrt(2) = 0.635310
    assert sd[0] == pytest.approx(12.7062047 * 0.0707107 / 2**0.5, abs=1e-5)
    xt, _, _ = plots._mean_curve(grpo.ok_runs, lambda r: r.series("reward/total"), lambda r: r.series("time/elapsed"))
    assert xt == pytest.approx([2.5, 5.0, 7.5, 10.0])  # mean of 2,4,6,8 and 3,6,9,12


def test_report_with_missing_metrics_and_fallbacks(tmp_path):
    root = tmp_path / "s"
    d = root / "grpo-s0"
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(
        '{"step": 0, "reward/total": 0.5}\n{"step": 1, "reward/total": 0.25}\n{"step": 2, "rew'
    )
    (d / "config.yaml").write_text(
        yaml.safe_dump({"variant": "grpo", "budget": {"max_new_tokens": 16}, "optim": {"lr": 1e-5}})
    )
    md = report.write_report(root, console=Console(file=io.StringIO())).read_text()
    row = dict(zip(_row(md, "arm"), _row(md, "grpo")))
    assert (row["final reward"], row["best reward"], row["status"]) == ("0.250", "0.500", "unfinished")
    assert (row["accuracy"], row["peak mem (MB)"]) == ("-", "-")
    assert (row["group_size"], row["updates"]) == ("64", "1x1")  # the registry grpo's defaults
    assert "plots/reward_vs_step.png" in md and "eval_accuracy.png" not in md


def test_report_errors_name_the_folder(tmp_path):
    with pytest.raises(report.ReportError, match="no such folder"):
        report.write_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(report.ReportError, match="no arm folders"):
        report.write_report(tmp_path / "empty")


def test_mean_std_and_format():
    assert stats.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0, 3)
    assert stats.mean_std([None, float("nan")]) is None
    assert stats.fmt_ms([0.5]) == "0.500" and stats.fmt_ms([]) == "-"


def _finished_run(d: Path, totals: list[float]) -> Path:
    """A finished 4-step run: metrics.jsonl with one reward/total per step, summary.json with the last."""
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s + 1, "reward/total": t}) + "\n" for s, t in enumerate(totals))
    )
    (d / "summary.json").write_text(
        json.dumps({"status": "finished", "steps": len(totals), "reward/total": totals[-1]})
    )
    (d / "config.yaml").write_text(yaml.safe_dump({"variant": "grpo", "budget": {"max_new_tokens": 16}}))
    return d


def test_a_cut_metrics_file_takes_the_final_reward_from_the_summary_and_warns(tmp_path):
    d = _finished_run(tmp_path / "s" / "grpo-s0", [0.5, 0.575, 0.65, 0.725])
    text = (d / "metrics.jsonl").read_text()
    (d / "metrics.jsonl").write_text(text[: text.rindex('{"step": 3') + 12])  # cut inside step 3: ends at step 2
    out = io.StringIO()
    md = report.write_report(tmp_path / "s", console=Console(file=out, width=300)).read_text()
    row = dict(zip(_row(md, "arm"), _row(md, "grpo")))
    assert row["final reward"] == "0.725"  # summary.json's, not step 2's 0.575
    warns = [
        f"{d / 'metrics.jsonl'}: skipped 1 unreadable line(s)",
        f"{d / 'metrics.jsonl'}: ends at step 2 but summary.json records 4 steps",
    ]
    for w in warns:
        assert w in md and f"warning: {w}" in out.getvalue()


def test_a_non_utf8_byte_skips_one_line_not_the_report(tmp_path):
    good = _finished_run(tmp_path / "s" / "grpo-s0", [0.25, 0.5])
    bad = tmp_path / "s" / "dapo-s0"
    bad.mkdir()
    (bad / "metrics.jsonl").write_bytes(
        b'{"step": 1, "reward/total": 0.1}\n{"step": 2, "reward/total": 0.3}\xff\n{"step": 3, "reward/total": 0.2}\n'
    )
    (bad / "summary.json").write_bytes(b'{"status": "finished", "reward/total": 0.2\xff}')
    out = io.StringIO()
    md = report.write_report(tmp_path / "s", console=Console(file=out, width=300)).read_text()
    assert dict(zip(_row(md, "arm"), _row(md, "grpo")))["final reward"] == "0.500"
    row = dict(zip(_row(md, "arm"), _row(md, "dapo")))
    assert (row["final reward"], row["best reward"], row["status"]) == ("0.200", "0.200", "unfinished")
    assert f"warning: {bad / 'metrics.jsonl'}: skipped 1 unreadable line(s)" in out.getvalue()
    assert f"warning: {bad / 'summary.json'}: unreadable, ignored" in out.getvalue()
    assert not any(str(good) in line for line in out.getvalue().splitlines() if line.startswith("warning"))


def test_scoring_counts_are_not_objectives():
    """reward/failed (a count) and reward/unscored_frac (a fraction of rows) describe the scoring:
    neither gets an objective column nor a reward panel; real objectives do."""
    from zoo.study.report.runs import RunData
    from zoo.study.report.stats import reward_keys

    recs = [
        {"step": 1, "reward/total": 1.0, "reward/correctness": 0.5, "reward/failed": 2.0, "reward/unscored_frac": 0.25}
    ]
    run = RunData.__new__(RunData)
    run.records = recs
    assert reward_keys([run]) == ["reward/total", "reward/correctness"]


def test_sqrt_kl_axis_and_proxy_gold_plot(study):
    """Gao et al.'s x axis: sqrt(token-mean KL x mean completion length). grpo-s0 at step 2 logged
    kl/ref 0.02 and len_mean 22 -> sqrt(0.44) = 0.663325; a negative k1 estimate counts as 0."""
    groups = report.group_runs(report.discover(study))
    run = next(r for g in groups if g.name == "grpo" for r in g.ok_runs if r.label == "grpo-s0")
    x = plots.sqrt_seq_kl(run)
    assert x[0] == 0.0 and x[2] == pytest.approx(0.663325, abs=1e-6)
    run.records.append({"step": 1, "kl/ref": -0.5, "completion/len_mean": 21})
    assert plots.sqrt_seq_kl(run)[1] == 0.0
    md = report.write_report(study, console=Console(file=io.StringIO())).read_text()
    assert "proxy_gold_vs_sqrt_kl.png" not in md  # no gold reward logged: no reward-hacking plot
    for label in RUNS:  # now every run logs a gold reward next to the proxy; dapo (as kl: none) no kl/ref
        p = study / label / "metrics.jsonl"
        recs = [json.loads(line) for line in p.read_text().splitlines()]
        for rec in recs:
            if "reward/total" in rec:
                rec["gold/correctness"] = 0.5 - rec["kl/ref"]
                if label.startswith("dapo"):
                    del rec["kl/ref"]
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    md = report.write_report(study, console=Console(file=io.StringIO())).read_text()
    assert "plots/proxy_gold_vs_sqrt_kl.png" in md
    # dapo has no point there, and the title says so (ppo failed before a step: in no plot, not named)
    assert "## Proxy and gold reward vs sqrt(KL to reference) (not shown: dapo, no kl/ref logged)\n" in md
    assert (study / "plots" / "proxy_gold_vs_sqrt_kl.png").read_bytes()[:8] == PNG_MAGIC


def test_a_killed_seed_is_listed_but_left_out_of_the_statistics(study):
    """grpo-s1 killed after step 1 of 4 (steps 0-1 logged, summary.json still 'running'): the table
    keeps it ("1 finished, 1 unfinished"), the statistics use grpo-s0 only (final reward 0.4, eval
    after 0.50, not grpo-s1's before-training 0.35), and report.md, report.json and the terminal say why."""
    d = study / "grpo-s1"
    recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:3]))  # before-eval, steps 0, 1
    (d / "summary.json").write_text(
        json.dumps({"status": "running", "steps": 0, "eval/before": {"eval/greedy_acc": 0.35}})
    )
    out = io.StringIO()
    md = report.write_report(study, console=Console(file=out, width=200)).read_text()
    msg = "grpo-s1 unfinished at step 1 of 4: left out of the statistics"
    assert "1 finished, 1 unfinished" in _row(md, "grpo")[2]
    assert f"- {msg}" in md.split("## Warnings", 1)[1] and f"warning: {msg}" in out.getvalue()
    js = json.loads((study / "report.json").read_text())
    assert js["left_out"][0] == {
        "arm": "grpo",
        "run": "grpo-s1",
        "status": "unfinished",
        "step": 1,
        "steps": 4,
        "message": msg,
    }
    vals = {(s["metric"], s["arm"]): s["values"] for s in js["stats"]}
    assert vals[("final reward", "grpo")] == {"0": 0.4} and vals[("eval accuracy", "grpo")] == {"0": 0.5}
    assert vals[("final reward", "dapo")] == {"0": 0.3, "1": 0.5}


def test_pending_runs_are_one_warning_with_their_count_not_one_each(study):
    """`zoo ablate --shard i/n` reports when its arms end, with the other shards' arms not started: 5
    pending runs (rloo-s0..s4, listed in study.json, no folder) are one warning with the count and the
    first 3 names, on the terminal and in report.md; report.json still lists each run."""
    index = json.loads((study / "study.json").read_text())
    index["arms"] += [{"label": f"rloo-s{i}"} for i in range(1, 5)]
    (study / "study.json").write_text(json.dumps(index))
    out = io.StringIO()
    md = report.write_report(study, console=Console(file=out, width=300)).read_text()
    line = "5 runs pending before their first step (rloo-s0, rloo-s1, rloo-s2 and 2 more): left out of the statistics"
    assert out.getvalue().count("pending before") == 1 and f"warning: {line}" in out.getvalue()
    assert f"- {line}" in md.split("## Warnings", 1)[1] and md.count("pending before") == 1
    js = json.loads((study / "report.json").read_text())
    assert [x["run"] for x in js["left_out"] if x["status"] == "pending"] == [f"rloo-s{i}" for i in range(5)]
    assert "ppo-s0 failed before its first step: left out of the statistics" in out.getvalue()  # others: one each
