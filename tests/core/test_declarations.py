"""Typed declarations: `register`'s keywords become a frozen `Declaration` (an unknown key is an error
at registration), and one vocabulary, `reads=`, decides what the step computes: a loss term that
reads `values` in a variant with a critic and a critic-free estimator gets the critic's values (the
trainer builds the critic because something reads them), and without a critic `zoo validate` fails
naming the term and the field."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
import torch
from conftest import tiny_run_config
from typer.testing import CliRunner

from zoo.cli import app
from zoo.core import registry
from zoo.core.declarations import Declaration

PROBE = "test_values_probe"


def test_an_unknown_declaration_is_an_error_at_registration():
    with pytest.raises(registry.ComponentError, match=r"unknown declaration 'raeds' \(did you mean 'reads'\?\)"):
        registry.register("loss", "test_typo_decl", raeds=("entropy",))
    assert "test_typo_decl" not in registry._REGISTRY["loss"]


def test_declarations_are_frozen_and_a_single_name_is_a_tuple():
    @registry.register("loss", "test_one_read", reads="entropy")
    def _term(inp):
        raise AssertionError("never called")

    try:
        d = registry.build("loss", "test_one_read").decl
        assert d == Declaration(reads=("entropy",))
        with pytest.raises(dataclasses.FrozenInstanceError):
            d.reads = ("logp",)  # type: ignore[misc]
    finally:
        registry._REGISTRY["loss"].pop("test_one_read", None)


@pytest.fixture
def values_probe():
    """A loss term that reads `values` and records each micro-batch's (values [n, T], mask [n, T])."""
    seen: list[tuple[torch.Tensor | None, torch.Tensor]] = []

    @registry.register("loss", PROBE, reads=("values",))
    def _probe(inp):
        seen.append((None if inp.values is None else inp.values.detach().clone(), inp.mask.clone()))
        from zoo import TermResult

        return TermResult(loss=torch.zeros_like(inp.logp))

    yield seen
    registry._REGISTRY["loss"].pop(PROBE, None)


def test_a_loss_term_reading_values_gets_the_critics_values(values_probe, tiny_model_dir, tmp_path):
    from zoo.run.trainer import setup
    from zoo.step import pipeline
    from zoo.step.forwards import critic_values
    from zoo.step.hooks import Hooks

    # grpo's estimator (group_mean) reads no values: only the loss term asks for the critic
    cfg = tiny_run_config(
        tiny_model_dir, tmp_path, set={"critic": "clipped_value", "loss": [PROBE]}, eval={"enabled": False}
    )
    st = setup(cfg)
    assert st.models.critic is not None and st.slots.reads("values")
    hand: list[torch.Tensor] = []

    class Watch(Hooks):  # the critic's values by a hand call on the rollout batch, before the update
        @contextlib.contextmanager
        def phase(self, name):
            with super().phase(name) as ph:
                yield ph
            if name == "advantage":
                with torch.no_grad():
                    b = ph.batch
                    v = critic_values(st.models.critic, b, st.settings)  # [N, T], one forward of the whole batch
                    hand.append(v[b.loss_mask])

    pipeline.step(st, Watch())
    assert values_probe and all(v is not None for v, _ in values_probe)
    got = torch.cat([v[m] for v, m in values_probe])  # rows in order: one epoch, one minibatch
    assert got.numel() == hand[0].numel() > 0
    torch.testing.assert_close(got, hand[0], rtol=1e-5, atol=1e-6)


def test_validate_fails_naming_the_term_and_the_field_without_a_critic(values_probe, tmp_path):
    f = tmp_path / "probe.yaml"
    f.write_text(f"name: probe\nbase: grpo\nslots:\n  loss: [{PROBE}]\n")
    r = CliRunner().invoke(app, ["validate", str(f), "--json"])
    assert r.exit_code == 1, r.stdout
    errors = json.loads(r.stdout)[0]["errors"]
    assert any(f"loss {PROBE!r} reads 'values'" in e and "a critic" in e and "probe.yaml" in e for e in errors), errors
    f.write_text(f"name: probe\nbase: grpo\nslots:\n  loss: [{PROBE}]\n  critic: clipped_value\n")
    assert CliRunner().invoke(app, ["validate", str(f)]).exit_code == 0
