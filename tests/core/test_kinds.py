"""zoo/core/kinds.py is the one slot table: the registry, the variant schema, the engine and `zoo list`
derive from it, and a variant must state (or inherit) every slot."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing

import pytest
from typer.testing import CliRunner

from zoo.cli import app
from zoo.config.variant import LIST_SLOTS, SLOT_KINDS, Slots, VariantError, load_variant
from zoo.core import kinds, registry
from zoo.step.types import Slots as StepSlots

runner = CliRunner()


def test_registry_kinds_are_the_table_kinds():
    assert registry.KINDS == kinds.registry_kinds()
    assert set(registry.available()) == {k.kind for k in kinds.TABLE if k.registered}
    assert "kl_estimator" in registry.KINDS and "kl_estimator" not in kinds.slots()  # a kind, not a slot
    assert "kl" in kinds.slots() and "kl" not in registry.KINDS  # a slot (a setting), not a kind
    with pytest.raises(registry.ComponentError, match="kinds: advantage, normalizer"):
        registry.register("clipp", "x")


def test_variant_schema_is_the_table_slots():
    assert tuple(Slots.model_fields) == kinds.slots()
    assert all(f.is_required() for f in Slots.model_fields.values())  # no hidden defaults
    # every slot is named after its kind, except the list of controllers
    assert SLOT_KINDS == {
        **{s: s for s in kinds.slots() if s not in ("kl", "controllers")},
        "controllers": "controller",
    }
    assert LIST_SLOTS == ("length", "filter", "loss", "correction", "controllers")
    for slot in LIST_SLOTS:
        assert typing.get_origin(Slots.model_fields[slot].annotation) is list
    assert type(None) in typing.get_args(Slots.model_fields["critic"].annotation)  # `critic: null` is allowed
    assert type(None) not in typing.get_args(Slots.model_fields["clip"].annotation)


def test_engine_slots_list_no_slot_the_table_lacks():
    fields = {f.name for f in dataclasses.fields(StepSlots)} - {
        "kl_reward",
        "stages",
        "distill",
    }  # the kl: slot's reward part; plugin stages; the variant's distill: block (zoo/config/distill.py)
    assert fields <= set(kinds.slots()) | set(registry.KINDS)
    assert set(SLOT_KINDS) <= fields


def test_every_builtin_component_takes_its_kinds_contract():
    for kind in registry.KINDS:
        want = kinds.positional_arity(kinds.by_kind(kind).contract)
        for name in registry.available(kind):
            fn = registry.get(kind, name).fn
            params = inspect.signature(fn).parameters.values()
            got = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
            assert got == want, f"{kind} {name!r} takes {got} data arguments, the contract {want}"


def test_by_kind_names_the_known_kinds():
    assert kinds.by_kind("clip").reads == ("logp", "logp_old", "advantages", "mask")
    with pytest.raises(KeyError, match="kinds: advantage"):
        kinds.by_kind("clpi")


def test_zoo_list_lists_every_kind_with_its_slot():
    r = runner.invoke(app, ["list"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    lines = {line.split("│")[1].strip(): line for line in r.output.splitlines() if line.count("│") >= 3}
    for row in kinds.TABLE:
        if row.registered:
            assert row.kind in lines and row.place() in lines[row.kind], row.kind
    assert "length (list)" in lines["length"] and "kl.estimator" in lines["kl_estimator"]
    r = runner.invoke(app, ["list", "--json"])
    assert set(json.loads(r.output)) == set(registry.KINDS) | {"variants", "tta", "tasks", "models"}
    assert "image_shapes" in lines["tasks"] and "tiny-vlm:qwen2vl" in lines["models"]


# --------------------------------------------------------------------------- no hidden defaults


def _variant(tmp_path, text: str):
    p = tmp_path / "v.yaml"
    p.write_text(text)
    return p


FULL = """name: mine
group_size: 4
updates: {epochs: 1, minibatches: 1}
slots:
  advantage: group_mean
  normalizer: group_std
  objective_norm: none
  aggregate: token_mean
  kl: none
  length: []
  filter: []
  critic: null
  loss: []
  correction: []
  controllers: []
"""


def test_a_variant_without_clip_and_no_base_fails_naming_file_and_slot(tmp_path):
    p = _variant(tmp_path, FULL)  # every slot but clip
    with pytest.raises(VariantError) as e:
        load_variant(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: missing key 'slots.clip'") and "base:" in msg
    r = runner.invoke(app, ["show", str(p)])
    assert r.exit_code == 1 and "slots.clip" in r.output and "Traceback" not in r.output
    p.write_text(FULL + "  clip: ppo\n")  # stated: resolves
    assert load_variant(p).resolved()["clip"] == {"name": "ppo", "eps": 0.2}


def test_missing_keys_are_all_named_and_a_base_supplies_them(tmp_path):
    p = _variant(tmp_path, "name: bare\nslots: {clip: cispo}\n")
    with pytest.raises(VariantError) as e:
        load_variant(p)
    msg = str(e.value)
    for key in ("group_size", "updates", "slots.advantage", "slots.kl", "slots.critic"):
        assert repr(key) in msg, key
    assert "slots.clip" not in msg
    p.write_text("name: bare\nbase: grpo\nslots: {clip: cispo}\n")
    v, grpo = load_variant(p), load_variant("grpo")
    assert v.resolved()["clip"]["name"] == "cispo" and v.group_size == grpo.group_size == 64
    assert {k: x for k, x in v.resolved().items() if k != "clip"} == {
        k: x for k, x in grpo.resolved().items() if k != "clip"
    }
