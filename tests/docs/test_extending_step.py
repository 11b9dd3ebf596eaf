"""docs/guides/extending.md section 5 runs as written: a loss term that reads the entropy, an advantage
estimator that reads token_rewards, and a token-selecting correction that reads logp_old and
advantages each train 2 steps on the tiny model with no change under zoo/step/; the correction's
selection over the whole optimizer step gives the same update with micro-batches of 2 as of 8."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_run_config
from test_engine import make_batch, settings

from zoo.config.variant import load_variant
from zoo.core import registry
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.run.trainer import train
from zoo.step.types import Models, Slots
from zoo.step.update import update

DOC = Path(__file__).resolve().parents[2] / "docs" / "guides" / "extending.md"
BLOCK = re.compile(r"<!-- test: (\w+) -->\s*\n```python\n(.*?)\n```", re.S)
MODULES = {
    "term": ("mylab.entropy_floor", "loss", "entropy_floor"),
    "estimator": ("mylab.reward_to_go", "advantage", "token_reward_to_go"),
    "correction": ("mylab.top_surprise", "correction", "top_surprise"),
}


@pytest.fixture
def mylab(tmp_path, monkeypatch):
    blocks = dict(BLOCK.findall(DOC.read_text()))
    (tmp_path / "mylab").mkdir()
    (tmp_path / "mylab" / "__init__.py").write_text("")
    for key, (mod, _, _) in MODULES.items():
        code = blocks[key]
        assert len(code.strip().splitlines()) < 30, key  # "each under 30 lines"
        (tmp_path / "mylab" / f"{mod.split('.')[1]}.py").write_text(code + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for _mod, kind, name in MODULES.values():
        registry._REGISTRY[kind].pop(name, None)
    for m in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
        del sys.modules[m]


@pytest.mark.parametrize(
    "key,sets",
    [
        ("term", {"loss": [{"name": "entropy_floor", "floor": 5.0, "coef": 0.1}]}),
        ("estimator", {"advantage": "token_reward_to_go", "normalizer": "none"}),
        ("correction", {"correction": [{"name": "top_surprise", "frac": 0.5}]}),
    ],
)
def test_each_documented_component_trains_two_steps(key, sets, mylab, tiny_model_dir, tmp_path):
    mod = MODULES[key][0]
    cfg = tiny_run_config(tiny_model_dir, tmp_path / key, plugins=[mod], set=sets, eval={"enabled": False})
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and summary["steps"] == 2
    if key == "term":  # the entropy of a random tiny model is below 5 nats: the penalty is on
        assert summary["loss/entropy_floor"] > 0


def _step_params(micro_batch: int, scope: str) -> dict[str, torch.Tensor]:
    import mylab.top_surprise  # noqa: F401

    model, tok = tiny_model_and_tokenizer(seed=0)
    batch = make_batch(tok, seed=3)
    slots = Slots.of(
        load_variant(
            "grpo",
            {
                "kl": "none",
                "aggregate": "token_mean",
                "correction": [{"name": "top_surprise", "frac": 0.4, "scope": scope}],
            },
        )
    )
    update(
        batch,
        Models(policy=model, tokenizer=tok, reference=None),
        slots,
        settings(micro_batch=micro_batch),
        torch.optim.SGD(model.parameters(), lr=1.0),
        None,
    )
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_a_selection_over_the_step_does_not_depend_on_the_micro_batch_split(mylab):
    a, b = _step_params(2, "step"), _step_params(8, "step")
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=1e-5, msg=k)
    # scope: micro selects within each micro-batch (as verl / TRL): with 2-row micro-batches the
    # kept tokens, and so the update, differ
    c = _step_params(2, "micro")
    assert any(not torch.allclose(a[k], c[k], atol=1e-6) for k in a)


def test_validate_rejects_a_read_nothing_produces():
    @registry.register("loss", "test_reads_values", reads=("values",))
    def _reads_values(inp, *, coef: float = 1.0):
        raise AssertionError("never called")

    @registry.register("loss", "test_reads_nothing_known", reads=("logits_of_god",))
    def _unknown(inp):
        raise AssertionError("never called")

    from zoo.checks.variant import check_variant

    try:
        rep = check_variant(load_variant("grpo", {"loss": ["test_reads_values"]}))
        assert any(
            "loss 'test_reads_values' reads 'values', which nothing in this variant produces: "
            "it needs a critic (slots.critic" in e
            for e in rep.errors
        ), rep.errors
        assert check_variant(load_variant("ppo", {"loss": ["test_reads_values"]})).ok  # ppo has a critic
        rep = check_variant(load_variant("grpo", {"loss": ["test_reads_nothing_known"]}))
        assert any("reads 'logits_of_god', which is no field of the step" in e for e in rep.errors)
        rep = check_variant(load_variant("grpo", {"advantage": {"name": "gae"}}))  # gae without a critic
        assert any("advantage 'gae' reads 'values'" in e for e in rep.errors), rep.errors
    finally:
        registry._REGISTRY["loss"].pop("test_reads_values", None)
        registry._REGISTRY["loss"].pop("test_reads_nothing_known", None)
