"""zoo.study.report.intervals and zoo.study.report.seed_stats by hand: IQM of a known list, the power formula, a
paired difference with its bootstrap interval, "1 seed: no interval", unpaired arms named as such."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from zoo.study.report.intervals import (
    BOOTSTRAP_SEED,
    N_RESAMPLES,
    difference,
    estimate,
    iqm,
    probability_of_improvement,
    seeds_needed,
)
from zoo.study.report.runs import ArmGroup, RunData
from zoo.study.report.seed_stats import ArmComparison, pairing_note, seed_statistics
from zoo.study.report.stats_table import compare_rows, stats_rows


def test_iqm_of_a_known_list():
    # n = 8: cut int(0.25 * 8) = 2 from each end of [1, 2, 3, 4, 5, 6, 7, 100] -> mean(3, 4, 5, 6) = 4.5
    assert iqm([7, 1, 100, 3, 2, 6, 5, 4]) == 4.5
    assert iqm([1.0, 2.0, 9.0]) == 4.0  # n = 3: nothing cut, the plain mean


def test_power_estimate_formula():
    # (z_0.975 + z_0.8)^2 = (1.959964 + 0.841621)^2 = 7.848866; sigma_d = 1, delta = 0.5 -> 31.395 -> 32 seeds
    assert seeds_needed(1.0, 0.5) == 32
    assert seeds_needed(2.0, -4.0) == 2  # 7.85 * 4 / 16 = 1.96 -> 2 (never fewer than 2)
    assert math.isinf(seeds_needed(1.0, 0.0))


def test_paired_difference_interval_verdict_and_probability_of_improvement():
    arm, base = {0: 1.0, 1: 2.0, 2: 4.0}, {0: 0.5, 1: 1.5, 2: 2.5}
    d = difference(arm, base, paired=True)
    # d_s = [0.5, 0.5, 1.5]: mean 0.8333; sample std sqrt(1/3) -> n = 7.8489 * (1/3) / 0.8333^2 = 3.77 -> 4
    assert d.delta == pytest.approx(2.5 / 3) and d.pairs == 3 and d.seeds_needed == 4
    # bootstrap means of 3 draws from {0.5, 0.5, 1.5}: P(all 0.5) = 8/27 > 2.5% and P(all 1.5) = 1/27 > 2.5%,
    # so the 2.5% and 97.5% percentiles are 0.5 and 1.5: the interval excludes 0
    assert (d.low, d.high) == (pytest.approx(0.5), pytest.approx(1.5))
    assert d.verdict == "higher† (n < 5: indicative)"  # 3 pairs: the interval is about [min d, max d]
    # P(arm > base) over the 9 pairs: 1 beats 0.5; 2 beats 0.5, 1.5; 4 beats all three -> 6/9
    assert d.p_improve == pytest.approx(6 / 9)
    assert probability_of_improvement([1.0], [1.0]) == 0.5  # a tie counts 1/2
    same = difference({0: 1.0, 1: 0.0, 2: 2.0}, {0: 2.0, 1: -1.0, 2: 1.5}, paired=True)  # d = [-1, 1, 0.5]
    assert same.low < 0 < same.high and same.verdict == "not distinguishable at this budget"


def test_one_seed_has_no_interval():
    e = estimate([0.42])
    assert (e.n, e.iqm, e.low, e.high) == (1, 0.42, None, None)
    d = difference({0: 1.0}, {0: 0.5}, paired=True)
    assert d.delta == 0.5 and d.verdict == "1 seed: no interval"
    # the main job's one-seed report: each arm's row and its comparison say so
    one = [ArmGroup("grpo", [_run("grpo-s0", 0, 4, [0.1, 0.3])]), ArmGroup("dapo", [_run("dapo-s0", 0, 4, [0.2, 0.6])])]
    stats, comps, _ = seed_statistics(one)
    assert next(r for r in stats_rows(stats)[1] if r[:2] == ["final reward", "grpo"]) == [
        "final reward",
        "grpo",
        "1",
        "0.300",
        "1 seed: no interval",
    ]
    row = next(r for r in compare_rows(comps)[1] if r[0] == "final reward")
    assert row[1:6] == ["dapo", "grpo", "1", "0.300", "1 seed: no interval"] and row[7] == "1 seed: no interval"


def test_estimate_interval_is_scipys_fixed_seed_bootstrap_of_the_iqm():
    vals = [0.1, 0.4, 0.35, 0.8, 0.5]
    e = estimate(vals)
    ref = sps.bootstrap(
        (np.array(vals),),
        lambda x, axis: sps.trim_mean(x, 0.25, axis=axis),
        n_resamples=N_RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    ).confidence_interval
    assert (e.low, e.high) == (ref.low, ref.high) and e.low <= e.iqm <= e.high
    assert estimate(vals).low == e.low  # reproducible


def _run(label, seed, group_size, totals):
    recs = [{"step": i + 1, "reward/total": t} for i, t in enumerate(totals)]
    return RunData(
        label,
        None,
        recs,
        {"status": "finished", "reward/total": totals[-1]},
        {"seed": seed, "budget": {"group_size": group_size, "prompts_per_step": 4}, "task": {"name": "t"}},
        seed,
        "finished",
    )


def test_different_group_sizes_are_compared_unpaired_and_say_so():
    a = ArmGroup("grpo", [_run("grpo-s0", 0, 4, [0.1, 0.2]), _run("grpo-s1", 1, 4, [0.2, 0.3])])
    b = ArmGroup("big", [_run("big-s0", 0, 8, [0.3, 0.5]), _run("big-s1", 1, 8, [0.2, 0.6])])
    assert pairing_note(b, a) == "not paired: group sizes 8 vs 4"
    stats, comps, warning = seed_statistics([a, b], baseline="grpo")
    final = next(c for c in comps if c.metric == "final reward")
    assert not final.diff.paired and final.diff.delta == pytest.approx(0.55 - 0.25)
    header, rows = compare_rows(comps)
    row = dict(zip(header, next(r for r in rows if r[0] == "final reward")))
    assert row["pairs"] == "2 (unpaired)" and "group sizes 8 vs 4" in row["verdict"]
    _, srows = stats_rows(stats)
    assert ["final reward", "grpo", "2", "0.250"] == next(r for r in srows if r[:2] == ["final reward", "grpo"])[:4]
    _, _, warning = seed_statistics([a, b], baseline="nope")
    assert "baseline 'nope' is not an arm" in warning and "grpo" in warning


def test_study_baseline_must_name_an_arm_and_defaults_to_the_first(tmp_path):
    from zoo.config.variant import VariantError
    from zoo.study import experiment, runner

    base = {
        "variants": ["grpo", "dr_grpo"],
        "ablations": {"no-clip": {"variant": "grpo", "set": {"clip": "none"}}},
        "output_dir": str(tmp_path / "s"),
    }
    with pytest.raises(
        VariantError, match=r"key 'baseline': 'ppo' is not an arm of this study \(known: grpo, dr_grpo, no-clip\)"
    ):
        experiment.parse_study({**base, "baseline": "ppo"}, "s.yaml")
    st = experiment.parse_study({**base, "baseline": "no-clip"}, "s.yaml")
    assert all("baseline" not in a.config.model_dump() for a in experiment.expand_arms(st))  # a study key, not an arm's
    import json

    assert json.loads(runner.write_index(st, experiment.expand_arms(st)).read_text())["baseline"] == "no-clip"
    st = experiment.parse_study(base, "s.yaml")
    assert json.loads(runner.write_index(st, experiment.expand_arms(st)).read_text())["baseline"] == "grpo"


def test_few_seed_intervals_are_marked_and_json_seeds_needed_is_int_or_null():
    """A bootstrap interval from 2-4 seeds is about [min, max]: marked †; from 5, unmarked. In JSON,
    seeds_needed is an int, or null with the reason (delta 0; a single pair)."""
    from zoo.study.report.seed_stats import ArmComparison, to_json
    from zoo.study.report.stats_table import fmt_ci

    assert fmt_ci(0.1, 0.3, 2) == "[0.100, 0.300]†" and fmt_ci(0.1, 0.3, 4).endswith("†")
    assert fmt_ci(0.1, 0.3, 5) == "[0.100, 0.300]"
    same = difference({0: 0.5, 1: 0.7}, {0: 0.5, 1: 0.7}, paired=True)  # delta exactly 0
    one = difference({0: 0.5}, {0: 0.25}, paired=True)
    some = difference({0: 0.5, 1: 0.9, 2: 0.6}, {0: 0.25, 1: 0.5, 2: 0.5}, paired=True)
    js = to_json([], [ArmComparison("m", "a", "b", d, None) for d in (same, one, some)], "b")
    got = [(c["diff"]["seeds_needed"], c["diff"]["seeds_needed_note"]) for c in js["comparisons"]]
    # some: d = 0.25, 0.4, 0.1: mean 0.25, sd 0.15 -> 7.849 * 0.0225 / 0.0625 = 2.83 -> 3
    assert got == [(None, "delta is 0"), (None, "fewer than 2 seeds"), (3, None)]
    assert isinstance(got[2][0], int)


def test_stats_tables_wrap_in_a_narrow_terminal_and_never_cut_a_cell():
    """An 80-column terminal wraps the 9-column comparison table; no cell is cut with an ellipsis."""
    import io

    from rich.console import Console

    from zoo.study.report import print_stats
    from zoo.study.report.stats_table import compare_rows, stats_rows

    a = ArmGroup("grpo", [_run(f"grpo-s{s}", s, 4, [0.1 * s, 0.2]) for s in range(3)])
    b = ArmGroup(
        "mo_grpo_with_a_long_name", [_run(f"mo_grpo_with_a_long_name-s{s}", s, 4, [0.3, 0.1 * s]) for s in range(3)]
    )
    stats, comps, warning = seed_statistics([a, b], baseline="grpo")
    buf = io.StringIO()
    print_stats(
        (stats_rows(stats), compare_rows(comps), "grpo", warning),
        Console(file=buf, width=80, force_terminal=True, color_system=None),
    )
    text = buf.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    assert "[-0.20" in text and "0.000]" in text  # the interval folded over lines, not cut


def _killed(label, seed, totals, steps, evals=()):
    """A run killed mid-training: metrics up to len(totals) of `steps`, no final summary."""
    recs = [{"step": i + 1, "reward/total": t} for i, t in enumerate(totals)] + list(evals)
    return RunData(
        label,
        None,
        recs,
        {"status": "running", "steps": 0},
        {"seed": seed, "budget": {"steps": steps, "group_size": 4, "prompts_per_step": 4}, "task": {"name": "t"}},
        seed,
        "unfinished",
    )


def test_unfinished_seed_is_left_out_of_the_statistics_and_named():
    """grpo-s1 was killed at step 2 of 3 with reward 0.9 there: the final-reward IQM is over s0 and s2
    only, (0.4 + 0.6) / 2 = 0.5 (with s1's 0.9 it would be 0.633); its before-training eval (0.25, the
    only eval record) is not its 'after' eval."""
    from zoo.study.report.left_out import left_out
    from zoo.study.report.stats import eval_acc

    before = {"step": 0, "eval/greedy_acc": 0.25, "eval/phase": 0.0}
    killed = _killed("grpo-s1", 1, [0.3, 0.9], steps=3, evals=[before])
    g = ArmGroup("grpo", [_run("grpo-s0", 0, 4, [0.1, 0.2, 0.4]), killed, _run("grpo-s2", 2, 4, [0.2, 0.3, 0.6])])
    stats, comps, warning = seed_statistics([g])
    final = next(s for s in stats if s.metric == "final reward")
    assert final.values == {0: 0.4, 2: 0.6} and final.estimate.iqm == pytest.approx(0.5)
    assert eval_acc(killed, "after") is None and eval_acc(killed, "before") == 0.25
    unmarked = _killed("x-s0", 0, [0.3], steps=3, evals=[{"step": 1, "eval/greedy_acc": 0.5}])  # a mid-training eval
    assert eval_acc(unmarked, "after") is None
    assert [x.message for x in left_out([g])] == ["grpo-s1 unfinished at step 2 of 3: left out of the statistics"]
    pending = RunData("grpo-s3", None, [], {}, {}, 3, "pending")
    assert (
        left_out([ArmGroup("grpo", [pending])])[0].message
        == "grpo-s3 pending before its first step: left out of the statistics"
    )


def test_a_baseline_without_finished_runs_warns():
    base = ArmGroup("grpo", [_killed("grpo-s0", 0, [0.1], steps=3)])
    other = ArmGroup("dapo", [_run("dapo-s0", 0, 4, [0.2, 0.3])])
    stats, comps, warning = seed_statistics([base, other], baseline="grpo")
    assert comps == [] and warning == (
        "baseline arm grpo has no finished run (grpo-s0 unfinished): no comparisons against the baseline"
    )


def test_rounding_noise_is_a_zero_difference_and_huge_counts_print_short():
    """Per-seed values of two arms whose exact differences (-1, -1, -1, 3, 0)/320 sum to 0, read back
    from float32 metrics (a fresh user's study): their mean is 2.98e-09, not 0, and n = 7.85 sigma^2 /
    delta^2 was 25889815944021. |delta| <= 1e-6 * 0.78 is rounding: seeds_needed inf, JSON null."""
    from zoo.study.report.seed_stats import ArmComparison, to_json
    from zoo.study.report.stats_table import fmt_seeds_needed

    base = {0: 0.7250000387430191, 1: 0.78125, 2: 0.7281250208616257, 3: 0.7218749821186066, 4: 0.7250000387430191}
    arm = {
        0: 0.7218750417232513,
        1: 0.7781250029802322,
        2: 0.7250000238418579,
        3: 0.731249988079071,
        4: 0.7250000387430191,
    }
    d = difference(arm, base, paired=True)
    assert 0 < d.delta < 1e-8 and math.isinf(d.seeds_needed) and d.verdict == "not distinguishable at this budget"
    js = to_json([], [ArmComparison("m", "a", "b", d)], "b")["comparisons"][0]["diff"]
    assert (js["seeds_needed"], js["seeds_needed_note"]) == (None, "delta is 0")
    # a real (if small) difference is not noise: d = 0.001, 0.002 -> mean 0.0015, sd 0.000707:
    # n = 7.849 * 5e-7 / 2.25e-6 = 1.74 -> 2
    small = difference({0: 0.501, 1: 0.502}, {0: 0.5, 1: 0.5}, paired=True)
    assert small.seeds_needed == 2
    assert fmt_seeds_needed(25889815944021) == "> 10^6" and fmt_seeds_needed(1e6) == "1000000"
    assert fmt_seeds_needed(math.inf) == "∞" and fmt_seeds_needed(None) == "-"


def test_verdicts_from_fewer_than_5_pairs_are_marked_indicative():
    """2 pairs with d = 0.1, 0.3: the percentile interval is [0.1, 0.3] (every resample mean lies in it),
    which two positive differences give with chance 1/4 under no effect: "higher†"; 5 pairs: "higher"."""
    two = difference({0: 0.6, 1: 0.8}, {0: 0.5, 1: 0.5}, paired=True)
    assert (two.low, two.high) == (pytest.approx(0.1), pytest.approx(0.3))
    assert two.verdict == "higher† (n < 5: indicative)"
    assert difference({0: 0.4, 1: 0.2}, {0: 0.5, 1: 0.5}, paired=True).verdict == "lower† (n < 5: indicative)"
    five = difference({s: 0.6 + 0.01 * s for s in range(5)}, {s: 0.5 for s in range(5)}, paired=True)
    assert five.verdict == "higher"
    header, rows = compare_rows([ArmComparison("m", "a", "b", two)])
    assert dict(zip(header, rows[0]))["verdict"] == "higher† (n < 5: indicative)"


def test_baseline_names_are_checked_with_hints():
    from zoo.config.variant import VariantError
    from zoo.study import experiment
    from zoo.study.baseline_check import check_baseline

    with pytest.raises(VariantError, match=r"'grpo-s0' is not an arm .*; drop the seed suffix: baseline: grpo "):
        check_baseline("grpo-s0", ["grpo", "dr_grpo"], "s.yaml")
    with pytest.raises(VariantError, match=r"'grpoo' is not an arm .* \(did you mean 'grpo'\?\)"):
        check_baseline("grpoo", ["grpo", "dr_grpo"], "s.yaml")
    check_baseline("grpo", ["grpo"], "s.yaml")  # an arm: no error
    study = {"variants": ["grpo"], "sweep": {"optim.lr": [1e-5, 1e-4]}, "output_dir": "/tmp/x"}
    with pytest.raises(
        VariantError,
        match=r"key 'baseline': 'grpo' is not an arm .*one sweep point's arm: "
        r"grpo-optim.lr=1e-05 or grpo-optim.lr=0.0001",
    ):
        experiment.parse_study({**study, "baseline": "grpo"}, "s.yaml")
    assert (
        experiment.parse_study({**study, "baseline": "grpo-optim.lr=0.0001"}, "s.yaml").baseline
        == "grpo-optim.lr=0.0001"
    )
    assert {a.group for a in experiment.expand_arms(experiment.parse_study(study, "s.yaml"))} == {
        "grpo-optim.lr=1e-05",
        "grpo-optim.lr=0.0001",
    }  # the names the check accepts are the arms' names


def test_column_groups_fit_the_room():
    from zoo.study.report.console_fit import column_groups

    # widths [4, 5, 5, 5], each + 3: the arm (7) + one column (8) = 15, + another = 23
    assert column_groups([4, 5, 5, 5], 20) == [[1], [2], [3]]
    assert column_groups([4, 5, 5, 5], 23) == [[1, 2], [3]]
    assert column_groups([4, 5, 5, 5], 1000) == [[1, 2, 3]]
    assert column_groups([4, 50, 5], 20) == [[1], [2]]  # too wide alone: its own group, folded
    assert column_groups([4, 4, 5, 5], 30, keep=2) == [[2, 3]] and column_groups([4, 4, 5, 5], 22, keep=2) == [[2], [3]]


def test_side_by_side_table_in_80_columns_keeps_arms_whole_and_cuts_nothing():
    """16 columns of "0.376 ± 0.066" need ~230 columns: an 80-column terminal gets column groups, each
    with the arm column; piped (not a terminal) the table is one block, every row on one line."""
    import io

    from rich.console import Console

    from zoo.study.report import print_table

    header = [
        "arm",
        "seeds",
        "status",
        "final reward",
        "best reward",
        "mean reward 1st → 2nd half",
        "final reward/correctness",
        "accuracy",
        "eval greedy before → after",
        "time/step (s)",
        "peak mem (MB)",
        "group_size",
        "updates",
        "lr",
        "max_new_tokens",
    ]
    cells = [
        "0,1,2,3,4",
        "finished",
        "0.376 ± 0.066",
        "0.438 ± 0.054",
        "0.383 ± 0.040 → 0.379 ± 0.030",
        "0.025 ± 0.056",
        "0.025 ± 0.056",
        "0.000 ± 0.000 → 0.025",
        "0.11 ± 0.01",
        "492 ± 0",
        "4",
        "1x1",
        "0.001",
        "16",
    ]
    rows = [["grpo", *cells], ["mo_grpo_with_a_long_name", *cells]]
    buf = io.StringIO()
    print_table("s", header, rows, Console(file=buf, width=80, force_terminal=True, color_system=None))
    text = buf.getvalue()
    lines = text.splitlines()
    assert "…" not in text and max(len(x) for x in lines) <= 80
    n_groups = sum(1 for x in lines if x.lstrip().startswith("arm "))
    assert n_groups > 1 and sum("mo_grpo_with_a_long_name" in x for x in lines) == n_groups  # whole, in each group
    for c in cells:  # every number whole somewhere (not split mid-digit)
        assert all(w in text for w in c.split()), c
    buf = io.StringIO()
    print_table("s", header, rows, Console(file=buf, width=80))  # a log file: not a terminal
    line = next(x for x in buf.getvalue().splitlines() if "mo_grpo_with_a_long_name" in x)
    assert "…" not in buf.getvalue() and all(c in line for c in cells)


def test_the_last_k_label_says_how_many_steps_the_mean_covers():
    # after 2 steps the "last 5" mean is over 2 steps: the label must say 2, and 5 once a run has 5 or more
    from zoo.study.report.seed_stats import metric_table

    short = [ArmGroup("grpo", [_run("grpo-s0", 0, 4, [0.1, 0.2])])]
    long = [ArmGroup("grpo", [_run("grpo-s0", 0, 4, [0.1] * 7)])]
    assert "reward/total last 2" in [n for n, _ in metric_table(short)]
    assert "reward/total last 5" in [n for n, _ in metric_table(long)]
