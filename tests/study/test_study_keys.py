"""Study keys that collide are said (issue 37 §3): an ablation and the sweep setting one key, a sweep
key that replaces another whole, two arms that resolve to the same configuration; `zoo ablate
--dry-run` says so in one line, without a traceback."""

import subprocess
import sys

import pytest

from zoo.config.run import async_opts
from zoo.config.variant import VariantError
from zoo.study.experiment import expand_arms, load_study

HEAD = "name: demo\nmodel: ./m\nbudget: {steps: 2, prompts_per_step: 2, group_size: 4}\ntracking: {wandb: false}\n"


def _arms(tmp_path, body):
    p = tmp_path / "s.yaml"
    p.write_text(HEAD + body)
    return expand_arms(load_study(p))


def test_an_ablation_and_the_sweep_setting_one_key_is_refused_naming_both(tmp_path):
    body = "ablations: {fast: {variant: grpo, set: {optim.lr: 1.0e-3}}}\nsweep: {optim.lr: [1.0e-5, 2.0e-5]}\n"
    with pytest.raises(VariantError) as e:
        _arms(tmp_path, body)
    msg = str(e.value)
    assert "arm 'fast'" in msg and "key 'optim.lr' is set by ablations.fast.set (0.001)" in msg
    assert "sweep.optim.lr sets it again" in msg and "sweep.optim.lr wins" in msg


def test_a_sweep_key_replaced_whole_by_a_later_one_is_refused(tmp_path):
    with pytest.raises(VariantError) as e:
        _arms(tmp_path, "variants: [grpo]\nsweep: {clip.eps: [0.1, 0.2], clip: [ppo]}\n")
    msg = str(e.value)
    assert "key 'clip.eps' is set by sweep.clip.eps" in msg and "sweep.clip replaces it whole" in msg


def test_a_parent_key_before_its_child_is_fine(tmp_path):
    arms = _arms(tmp_path, "ablations: {a: {variant: grpo, set: {clip: ppo}}}\nsweep: {clip.eps: [0.1, 0.3]}\n")
    assert [a.config.set for a in arms] == [{"clip": "ppo", "clip.eps": 0.1}, {"clip": "ppo", "clip.eps": 0.3}]


def test_two_arms_that_resolve_to_the_same_configuration_are_said_naming_both(tmp_path):
    from zoo.study.validate import check_arms

    # sweep points of one arm: refused (`clip: ppo` is ppo with its default eps 0.2)
    with pytest.raises(VariantError, match=r"same arm twice \(grpo-clip=ppo-s0 = grpo-clip=.*-s0\)"):
        _arms(tmp_path, "variants: [grpo]\nsweep: {clip: [ppo, {name: ppo, eps: 0.2}]}\n")
    body = "variants: [grpo]\nablations: {clip-default: {variant: grpo, set: {clip.eps: 0.2}}}\nseeds: [0, 1]\n"
    arms = _arms(tmp_path, body)  # two arms of their own names (clip.eps 0.2 is grpo's default): refused
    rep = check_arms(arms, load_files=False)
    assert [e for e in rep.errors if "resolve to the same" in e] == [
        "arms grpo and clip-default resolve to the same configuration (seeds 0, 1; they differ only in "
        "set.clip.eps = unset in grpo, 0.2 in clip-default, which resolve to the same variant and run settings): "
        "they would train the same run twice; remove one or make them differ"
    ]
    assert not any("resolve to the same" in w for w in rep.warnings)


def test_arms_that_differ_only_by_seed_or_by_an_effective_value_are_not_alike(tmp_path):
    from zoo.study.validate import check_arms

    body = "variants: [grpo]\nablations: {tight: {variant: grpo, set: {clip.eps: 0.1}}}\nseeds: [0, 1]\n"
    rep = check_arms(_arms(tmp_path, body), load_files=False)
    assert not any("resolve to the same" in m for m in rep.errors + rep.warnings)


def test_zoo_ablate_dry_run_refuses_two_arms_alike_naming_both(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(HEAD + "variants: [grpo]\nablations: {small: {variant: grpo, set: {group_size: 3}}}\n")
    out = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "ablate", str(p), "--dry-run"], capture_output=True, text=True, timeout=120
    )
    text = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0 and "Traceback" not in text
    assert "arms grpo and small resolve to the same configuration (seed 0; they differ only in set.group_size" in text


def test_zoo_ablate_dry_run_says_it_without_a_traceback(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(HEAD + "ablations: {fast: {variant: grpo, set: {optim.lr: 1.0e-3}}}\nsweep: {optim.lr: [1.0e-5]}\n")
    out = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "ablate", str(p), "--dry-run"], capture_output=True, text=True, timeout=120
    )
    text = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0 and "Traceback" not in text and "key 'optim.lr' is set by ablations.fast.set" in text


def test_a_key_of_the_shared_set_that_an_ablation_sets_again_is_warned(tmp_path):
    from zoo.study.validate import check_study_file

    p = tmp_path / "s.yaml"
    p.write_text(
        HEAD + "set: {clip.eps: 0.3}\nvariants: [grpo]\nablations: {tight: {variant: grpo, set: {clip.eps: 0.1}}}\n"
    )
    warned = [w for w in check_study_file(p).warnings if "is set by set" in w]
    assert warned == [
        "arm tight: key 'clip.eps' is set by set (0.3) and ablations.tight.set sets it again (clip.eps = 0.1): "
        "ablations.tight.set wins and the value of set is dropped"
    ]


def test_an_ablation_may_set_the_async_block_for_its_arm_only(tmp_path):
    body = (
        "async: {max_staleness: 0, backend: simulated}\nvariants: [grpo]\n"
        "ablations: {grpo-k4: {variant: grpo, set: {async.max_staleness: 4}}}\n"
    )
    arms = {a.base: a.config for a in _arms(tmp_path, body)}
    assert async_opts(arms["grpo"]).max_staleness == 0 and async_opts(arms["grpo-k4"]).max_staleness == 4
    assert async_opts(arms["grpo-k4"]).backend == "simulated" and arms["grpo-k4"].set == {}
