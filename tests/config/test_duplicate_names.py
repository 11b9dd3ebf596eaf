"""A name given twice in a user's file is an error naming it, never silently resolved: a YAML key
repeated in a run file (PyYAML would keep the last) and an item listed twice in a list slot."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from zoo.cli import app

runner = CliRunner()


def test_a_key_given_twice_is_an_error(tmp_path):
    # PyYAML's safe loader keeps the last `variant:`: ppo would silently replace grpo
    f = tmp_path / "dup.yaml"
    f.write_text("variant: grpo\nbudget: {steps: 2}\nvariant: ppo\n")
    r = runner.invoke(app, ["validate", str(f)])
    text = " ".join((r.stdout + (r.stderr or "")).split())
    assert r.exit_code == 1 and "key 'variant' is given twice (first on line 1)" in text


def test_a_list_slot_item_repeated_is_an_error(tmp_path):
    """`correction: [tis, tis]` would apply the weight twice; two `overlong_soft` items at different
    cache fractions would log under one `reward/overlong_soft` key: both are errors naming the slot."""
    from zoo.config.variant import VariantError, load_variant

    p = tmp_path / "dup.yaml"
    p.write_text("base: grpo\nname: dup\nslots:\n  correction: [tis, {name: tis}]\n")
    with pytest.raises(VariantError, match=r"slots.correction.*'tis' is listed 2 times"):
        load_variant(str(p))
    p.write_text(
        "base: grpo\nname: two\nslots:\n  length: [{name: overlong_soft, cache_frac: 0.2}, "
        "{name: overlong_soft, cache_frac: 0.5}]\n"
    )
    with pytest.raises(VariantError, match=r"slots.length.*'overlong_soft' is listed 2 times"):
        load_variant(str(p))
    p.write_text("base: grpo\nname: one\nslots:\n  correction: [tis, rs]\n")
    assert [c if isinstance(c, str) else c["name"] for c in load_variant(str(p)).slots.correction] == ["tis", "rs"]
