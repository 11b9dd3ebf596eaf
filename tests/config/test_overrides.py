"""zoo/config/overrides.py: the one dotted-override implementation, and the routing of variant, run and study files."""

from __future__ import annotations

import pytest
import yaml

from zoo.config.overrides import OverrideError, apply_dotted, did_you_mean, set_path
from zoo.config.run import set_dotted
from zoo.config.variant import VariantError, apply_overrides, load_variant
from zoo.study import experiment as E
from zoo.study.run_file import load_run_config


def test_set_path_makes_specs_and_mappings_on_the_way():
    tree = {"clip": "ppo", "wandb": True, "n": None}
    set_path(tree, ["clip", "eps"], 0.1, "f.yaml", "clip.eps")
    set_path(tree, ["wandb", "project"], "p", "f.yaml", "wandb.project")
    set_path(tree, ["n", "a", "b"], 1, "f.yaml", "n.a.b")
    assert tree == {"clip": {"name": "ppo", "eps": 0.1}, "wandb": {"project": "p"}, "n": {"a": {"b": 1}}}


def test_set_path_refuses_lists_and_scalars_in_the_way():
    with pytest.raises(OverrideError, match=r"^f.yaml: key 'length.cache_frac': length is a list slot; set it whole"):
        set_path({"length": []}, ["length", "cache_frac"], 0.2, "f.yaml", "length.cache_frac", list_name="list slot")
    with pytest.raises(OverrideError, match=r"lr is 0.001, not a mapping"):
        set_path({"lr": 1e-3}, ["lr", "x"], 1, "f.yaml", "lr.x")


def test_apply_dotted_copies_and_routes():
    data = {"set": {"kl": "none"}}
    out = apply_dotted(data, {"set.clip.eps": 0.3}, "f", lambda k: (("set",), [k.removeprefix("set.")]))
    assert out == {"set": {"kl": "none", "clip.eps": 0.3}} and data == {"set": {"kl": "none"}}
    assert did_you_mean("clpi", ["clip", "kl"]) == " (did you mean 'clip'?)" and did_you_mean("zzz", ["clip"]) == ""


# --------------------------------------------------------------------------- variant files


def test_variant_slot_param_on_a_name_only_slot():
    raw = {"slots": {"clip": "ppo", "kl": "none"}}
    out = apply_overrides(raw, {"clip.eps": 0.1, "slots.kl.beta": 0.0, "updates.minibatches": 2})
    assert out["slots"]["clip"] == {"name": "ppo", "eps": 0.1}
    assert out["slots"]["kl"] == {"placement": "none", "beta": 0.0}  # `kl: none` is a placement, not a name
    assert out["updates"] == {"minibatches": 2}
    v = load_variant("rloo", {"clip.name": "ppo", "clip.eps": 0.1})  # rloo says `clip: none`
    assert v.resolved()["clip"] == {"name": "ppo", "eps": 0.1}


def test_variant_list_slot_and_unknown_key_errors():
    with pytest.raises(
        VariantError, match=r"key 'length.cache_frac': length is a list slot; set it whole, e.g. length: \[...\]"
    ):
        load_variant("dapo", {"length.cache_frac": 0.1})
    with pytest.raises(VariantError) as e:
        load_variant("grpo", {"clp.eps": 0.1})
    msg = str(e.value)
    assert (
        "registry/grpo.yaml (overrides): key 'clp.eps' is neither a slot nor a variant field (did you mean 'clip'?)"
        in msg
    )
    assert "allowed: advantage, aggregate, base, clip, controllers, correction, critic" in msg


def test_a_whole_slot_mapping_without_a_name_points_to_the_dotted_key():
    # `set: {clip: {eps: 0.3}}` replaces grpo's clip; it used to fail as "component spec {'eps': 0.3} has no
    # 'name' key", with no word on the dotted key that changes one parameter
    with pytest.raises(VariantError) as e:
        load_variant("grpo", {"clip": {"eps": 0.3}})
    assert "key 'clip': a mapping replaces the variant's whole clip and needs a 'name'" in str(e.value)
    assert "set a dotted key: clip.eps: 0.3" in str(e.value)
    v = load_variant("grpo", {"clip": {"name": "clip_higher", "eps_high": 0.3}, "kl": {"placement": "none"}})
    assert v.resolved()["clip"] == {"name": "clip_higher", "eps_low": 0.2, "eps_high": 0.3}


# --------------------------------------------------------------------------- run files


def test_run_file_budget_steps_and_set(tmp_path):
    data = {"variant": "grpo", "budget": {"steps": 8, "micro_batch": 4}}
    out = set_dotted(data, {"budget.steps": 3, "set.clip.eps_high": 0.32, "tracking.wandb.mode": "disabled"}, "r.yaml")
    assert out["budget"] == {"steps": 3, "micro_batch": 4} and data["budget"]["steps"] == 8
    assert out["set"] == {"clip.eps_high": 0.32} and out["tracking"] == {"wandb": {"mode": "disabled"}}
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(data))
    assert load_run_config(p, {"budget.steps": 3}).budget.steps == 3
    with pytest.raises(
        VariantError, match=r"r.yaml: override 'budgett.steps': unknown key 'budgett' \(did you mean 'budget'\?\)"
    ):
        set_dotted(data, {"budgett.steps": 2}, "r.yaml")
    with pytest.raises(VariantError, match=r"rewards is a list; set it whole"):
        set_dotted({"rewards": ["correctness"]}, {"rewards.weight": 2}, "r.yaml")


# --------------------------------------------------------------------------- study files

STUDY = """
name: demo
budget: {steps: 2, prompts_per_step: 2, group_size: 4, updates: {epochs: 1, minibatches: 2}}
tracking: {wandb: false}
variants: [dapo]
sweep: {clip.eps_high: [0.28, 0.32], optim.lr: [1.0e-4]}
"""


def test_study_routes_slot_keys_to_the_variant_and_run_keys_to_the_run(tmp_path):
    assert E.route_key("clip.eps_high", "s") == "set" and E.route_key("optim.lr", "s") == "run"
    assert E.route_key("group_size", "s") == "set"
    p = tmp_path / "s.yaml"
    p.write_text(STUDY)
    arms = E.expand_arms(E.load_study(p))
    assert [a.config.set for a in arms] == [{"clip.eps_high": 0.28}, {"clip.eps_high": 0.32}]
    assert {a.config.optim.lr for a in arms} == {1e-4}
    assert load_variant("dapo", arms[1].config.set).resolved()["clip"]["eps_high"] == 0.32
    with pytest.raises(
        VariantError, match=r"'optm' is neither a variant slot/field nor a run-config key \(did you mean 'optim'\?\)"
    ):
        E.route_key("optm.lr", "s")


def test_study_overrides_keep_dotted_keys_whole_under_sweep_and_set(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(STUDY)
    st = E.load_study(
        p,
        {
            "sweep.clip.eps_high": [0.3],
            "ablations.tight.variant": "grpo",
            "ablations.tight.set.clip.eps": 0.1,
            "optim.lr": 2e-4,
        },
    )
    assert st.sweep == {"clip.eps_high": [0.3], "optim.lr": [1e-4]}
    assert st.ablations["tight"].set == {"clip.eps": 0.1} and st.optim.lr == 2e-4


def test_a_variant_key_on_the_command_line_points_to_set(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text("variant: grpo\n")
    with pytest.raises(
        VariantError,
        match=r"override 'loss.entropy_bonus.coef': 'loss' is a variant slot, not a "
        r"run-config key; write set.loss.entropy_bonus.coef",
    ):
        load_run_config(p, {"loss.entropy_bonus.coef": 0.01})
    assert load_run_config(p, {"set.loss.entropy_bonus.coef": 0.01}).set == {"loss.entropy_bonus.coef": 0.01}
