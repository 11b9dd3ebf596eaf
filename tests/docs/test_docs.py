"""docs/guides/extending.md runs as written: its marked code blocks become a plugin package, a user registry
directory and a run file in a temporary directory, and the documented results are checked.

Blocks are fenced code blocks preceded by `<!-- test: NAME -->`: `plugin` (mylab/components.py),
`example` (the hand-worked check, executed), `variant` (my_registry/grpo_tanh.yaml), `run`
(run_tanh.yaml) and `reward` (mylab/rewards.py). Whatever the test registers is removed afterwards,
so other tests see the built-in registry only.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from zoo.cli import app
from zoo.config.variant import build_components, load_variant
from zoo.core import registry

DOC = Path(__file__).resolve().parents[2] / "docs" / "guides" / "extending.md"
BLOCK = re.compile(r"<!-- test: (\w+) -->\s*\n```(\w+)\n(.*?)\n```", re.S)
CLIP, REWARD = "tanh_clip", "mylab.rewards:politeness"


def doc_blocks(doc: Path = DOC) -> dict[str, tuple[str, str]]:
    """name -> (language, code) of every marked block of `doc` (docs/guides/extending.md unless told)."""
    blocks = {}
    for name, lang, code in BLOCK.findall(doc.read_text()):
        assert name not in blocks, f"two blocks marked {name!r}"
        blocks[name] = (lang, code + "\n")
    return blocks


def _forget_plugin() -> None:
    registry.load_builtins()
    registry._REGISTRY["clip"].pop(CLIP, None)
    registry._REGISTRY["reward"].pop(REWARD, None)
    for mod in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
        del sys.modules[mod]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The documented files written to tmp_path, `mylab` importable, ZOO_REGISTRY_PATH set."""
    blocks = doc_blocks()
    assert {"plugin", "example", "variant", "run", "reward"} <= set(blocks)
    pkg = tmp_path / "mylab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "components.py").write_text(blocks["plugin"][1])
    (pkg / "rewards.py").write_text(blocks["reward"][1])
    reg = tmp_path / "my_registry"
    reg.mkdir()
    (reg / "grpo_tanh.yaml").write_text(blocks["variant"][1])
    (tmp_path / "run_tanh.yaml").write_text(blocks["run"][1])
    _forget_plugin()
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ZOO_REGISTRY_PATH", str(reg))
    yield tmp_path, blocks
    _forget_plugin()


def test_blocks_are_short_and_typed():
    blocks = doc_blocks()
    assert blocks["plugin"][0] == "python" and blocks["reward"][0] == "python"
    assert blocks["variant"][0] == "yaml" and blocks["run"][0] == "yaml"
    for name in ("plugin", "variant"):  # "a new clip rule and a new variant in under 30 lines"
        assert len(blocks[name][1].strip().splitlines()) < 30, name


def test_plugin_clip_computes_the_documented_values(project):
    _, blocks = project
    import mylab.components  # noqa: F401  (registers tanh_clip)

    assert CLIP in registry.available("clip")
    exec(compile(blocks["example"][1], "extending.md:example", "exec"), {})  # the doc's own asserts

    clip = registry.build("clip", {"name": CLIP, "eps": 0.5})
    logp = torch.tensor([[math.log(1.5), math.log(0.5), float("nan")]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, float("inf")]])
    res = clip(logp, old, torch.tensor([[1.0, -1.0, 7.0]]), torch.tensor([[1, 1, 0]]))
    assert torch.allclose(res.loss, torch.tensor([[-1.380797, 0.619203, 0.0]]), atol=1e-6)
    assert res.ratio[0, 2] == 1.0 and not res.clip_low.any() and not res.clip_high.any()
    res.loss.sum().backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 2] == 0
    # d loss / d logp = -A r (1 - tanh^2((r - 1) / eps))
    assert logp.grad[0, 0].item() == pytest.approx(-1.5 * (1 - math.tanh(1.0) ** 2), rel=1e-5)
    # defaults bound, bad values rejected at build time
    assert registry.build("clip", CLIP).resolved() == {"eps": 0.2}
    with pytest.raises(registry.ComponentError, match="eps must be > 0"):
        registry.build("clip", {"name": CLIP, "eps": 0.0})
    with pytest.raises(registry.ComponentError, match="did you mean 'tanh_clip'"):
        registry.build("clip", "tanh_clp")


def test_variant_resolves_with_the_new_clip(project):
    import mylab.components  # noqa: F401

    v = load_variant("grpo_tanh")
    assert v.slots.clip == {"name": CLIP, "eps": 0.2}
    assert build_components(v)["clip"].name == CLIP
    assert v.group_size == 64 and v.updates.minibatches == 2  # base: grpo, then the file's keys
    assert v.slots.aggregate == "seq_mean_token_mean" and v.slots.kl_spec().placement == "loss"


def test_cli_validate_show_and_diff(project):
    tmp, _ = project
    import mylab.components  # noqa: F401

    runner = CliRunner()
    env = {"COLUMNS": "200"}
    res = runner.invoke(app, ["validate", str(tmp / "my_registry" / "grpo_tanh.yaml")], env=env)
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["validate", "--json", str(tmp / "run_tanh.yaml")], env=env)
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.output)
    assert report["ok"] and not report["warnings"]  # 2 minibatches: the clip can act

    res = runner.invoke(app, ["show", "grpo_tanh"], env=env)
    assert res.exit_code == 0, res.output
    assert "tanh_clip" in res.output
    res = runner.invoke(app, ["show", "grpo_tanh", "--json"], env=env)
    assert json.loads(res.output)["slots"]["clip"] == {"name": CLIP, "eps": 0.2}

    res = runner.invoke(app, ["diff", "grpo", "grpo_tanh", "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert {r["key"] for r in json.loads(res.output)} == {"slots.clip.name", "updates.minibatches"}


def test_run_file_names_the_plugin(project):
    """`plugins:` in a run file is what lets `zoo validate` find the clip in a fresh process."""
    tmp, _ = project
    from zoo.config.run import reward_specs
    from zoo.study.run_file import load_run_config

    cfg = load_run_config(tmp / "run_tanh.yaml")
    assert cfg.plugins == ["mylab.components", "mylab.rewards"] and cfg.variant == "grpo_tanh"
    assert reward_specs(cfg)[1] == (REWARD, {"bonus": 1.0}, 0.3)
    registry.load_plugins(cfg.plugins)
    assert CLIP in registry.available("clip")


def test_reward_by_dotted_path(project):
    tmp, _ = project
    from zoo.rewards import compute_rewards, resolve_rewards

    cfg = yaml.safe_load((tmp / "run_tanh.yaml").read_text())
    ((comp, weight),) = resolve_rewards([cfg["rewards"][1]], cfg["plugins"])
    assert comp.name == REWARD and weight == 0.3 and comp.resolved() == {"bonus": 1.0}
    scores = compute_rewards([comp], ["Please, 4", "4", "  "], [{}, {}, {}])
    assert scores.objectives[:2, 0].tolist() == [1.0, 0.0] and math.isnan(scores.objectives[2, 0])
    assert scores.n_failed == [1]


# --------------------------------------------------------------------------- the slot table (docs/reference/components.md)

COMPONENTS_DOC = DOC.parents[1] / "reference" / "components.md"


def _table(text: str, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table whose header line is `header`."""
    lines = text.splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_components_doc_slot_table_is_the_kinds_table():
    from zoo.core import kinds

    rows = _table(COMPONENTS_DOC.read_text(), "| kind | slot | components |")
    assert [r[0] for r in rows] == [f"`{k.kind}`" for k in kinds.TABLE]
    for (_, slot, comps), k in zip(rows, kinds.TABLE):
        assert slot == k.place(), k.kind
        if k.registered:  # the built-in components (a test's plugin may be registered too)
            names = [n for n in registry.available(k.kind) if registry.get(k.kind, n).fn.__module__.startswith("zoo.")]
            assert comps == (", ".join(f"`{n}`" for n in names) or "—"), k.kind  # — : none built in yet
        else:
            assert comps == k.note, k.kind
    contract = _table(COMPONENTS_DOC.read_text(), "| kind | call | returns |")
    assert sorted(r[0] for r in contract) == sorted(kinds.registry_kinds())  # in data-flow order there
