"""Plugin stages (zoo/core/stages.py) as docs/guides/extending-engine.md section 4 shows them: a `digits` stage writes
`Batch.extras["digits"]`, a `digit_penalty` loss term reads it; the stage runs because the term reads
its field, the term's numbers match the hand-worked check, a 2-step run trains with both plugins,
and `zoo validate` rejects a read nothing writes and a read whose producer runs after its reader."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_run_config

from zoo import StepCounts, TermInputs
from zoo.checks.variant import check_variant
from zoo.config.variant import load_variant
from zoo.core import registry
from zoo.step.types import Slots

DOC = Path(__file__).resolve().parents[2] / "docs" / "guides" / "extending-engine.md"
BLOCK = re.compile(r"<!-- test: (\w+) -->\s*\n```python\n(.*?)\n```", re.S)
PLUGINS = {"stage": ("mylab.counters", "stage", "digits"), "reader": ("mylab.digit_penalty", "loss", "digit_penalty")}
TERM = {"loss": [{"name": "digit_penalty", "coef": 0.01}]}


@pytest.fixture
def mylab(tmp_path, monkeypatch):
    blocks = dict(BLOCK.findall(DOC.read_text()))
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    for key, (mod, _, _) in PLUGINS.items():
        assert len(blocks[key].strip().splitlines()) < 30, key
        (tmp_path / "mylab" / f"{mod.split('.')[1]}.py").write_text(blocks[key] + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for _, kind, name in PLUGINS.values():
        registry._REGISTRY[kind].pop(name, None)
    for m in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
        del sys.modules[m]


def test_the_hand_worked_check(mylab):
    import mylab.digit_penalty  # noqa: F401

    term = registry.build("loss", {"name": "digit_penalty", "coef": 0.01})
    mask = torch.tensor([[True, True], [True, False]])
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    inp = TermInputs(
        logp=logp,
        logp_old=logp,
        advantages=torch.zeros(2, 2),
        mask=mask,
        counts=StepCounts.of(mask),
        extras={"digits": torch.tensor([2.0, 0.0])},
    )
    torch.testing.assert_close(term(inp).loss, torch.tensor([[-0.02, -0.04], [0.0, 0.0]]))


def test_a_read_of_a_field_no_stage_writes_fails_validation_and_the_stage_fixes_it(mylab):
    import mylab.digit_penalty  # noqa: F401

    rep = check_variant(load_variant("grpo", TERM))
    assert any("loss 'digit_penalty' reads 'digits', which is no field of the step" in e for e in rep.errors), (
        rep.errors
    )
    import mylab.counters  # noqa: F401

    assert check_variant(load_variant("grpo", TERM)).ok
    assert [s.name for s in Slots.of(load_variant("grpo", TERM)).stages] == ["digits"]
    assert Slots.of(load_variant("grpo")).stages == []  # nothing reads digits: the stage does not run


def test_a_producer_that_runs_after_its_reader_fails_validation():
    @registry.register("stage", "test_late", after="advantage", writes=("late",))
    def _late(batch):
        raise AssertionError("never called")

    @registry.register("advantage", "test_reads_late", reads=("late",))
    def _adv(inp):
        raise AssertionError("never called")

    @registry.register("stage", "test_early_ref", after="reward", reads=("logp_ref",), writes=("early",))
    def _early(batch):
        raise AssertionError("never called")

    @registry.register("loss", "test_reads_early", reads=("early",))
    def _term(inp):
        raise AssertionError("never called")

    try:
        rep = check_variant(load_variant("grpo", {"advantage": "test_reads_late"}))
        assert any(
            "advantage 'test_reads_late' reads 'late', but stage 'test_late' (after advantage) makes it "
            "later in the step" in e
            for e in rep.errors
        ), rep.errors
        rep = check_variant(load_variant("grpo", {"loss": ["test_reads_early"]}))
        assert any(
            "stage 'test_early_ref' reads 'logp_ref', but the forwards stage makes it later" in e for e in rep.errors
        ), rep.errors
    finally:
        registry._REGISTRY["stage"].pop("test_late", None)
        registry._REGISTRY["stage"].pop("test_early_ref", None)
        registry._REGISTRY["advantage"].pop("test_reads_late", None)
        registry._REGISTRY["loss"].pop("test_reads_early", None)


def test_a_stage_with_a_bad_place_is_named():
    @registry.register("stage", "test_nowhere", after="update", writes=("x_field",))
    def _s(batch):
        raise AssertionError("never called")

    @registry.register("loss", "test_reads_x", reads=("x_field",))
    def _t(inp):
        raise AssertionError("never called")

    try:
        rep = check_variant(load_variant("grpo", {"loss": ["test_reads_x"]}))
        assert any(
            "stage 'test_nowhere': after='update'; use one of reward, forwards, advantage" in e for e in rep.errors
        ), rep.errors
    finally:
        registry._REGISTRY["stage"].pop("test_nowhere", None)
        registry._REGISTRY["loss"].pop("test_reads_x", None)


def test_both_plugins_train_and_the_stage_counts_the_kept_rows(mylab, tiny_model_dir, tmp_path):
    from zoo.run.trainer import setup
    from zoo.step import pipeline

    cfg = tiny_run_config(
        tiny_model_dir, tmp_path, plugins=["mylab.counters", "mylab.digit_penalty"], set=TERM, eval={"enabled": False}
    )
    st = setup(cfg)
    res = pipeline.step(st)
    hand = torch.tensor([float(sum(ch.isdigit() for ch in t)) for t in res.batch.texts])
    assert res.batch.size > 0 and torch.equal(res.batch.extras["digits"].cpu(), hand)
    assert math.isfinite(res.metrics["loss/digit_penalty"])
    res = pipeline.step(st)
    assert st.step == 2 and math.isfinite(res.metrics["loss/digit_penalty"])
