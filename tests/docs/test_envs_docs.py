"""docs/guides/extending-engine.md §2 runs as written: the `try_again` environment through the multi-turn rollout, its
run file's `task.env` validated, and the Gymnasium wrapper on a stand-in environment."""

import sys

import pytest
from test_docs import DOC, doc_blocks

from zoo.core import registry
from zoo.core.generator_types import SamplingParams
from zoo.envs.base import env_spec
from zoo.envs.rollout import rollout
from zoo.models.tiny import ScriptedGenerator, tiny_model_and_tokenizer

ENGINE_DOC = DOC.with_name("extending-engine.md")


@pytest.fixture
def mylab(tmp_path, monkeypatch):
    blocks = doc_blocks(ENGINE_DOC)
    pkg = tmp_path / "mylab"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "envs.py").write_text(blocks["env"][1])
    (pkg / "gym_wrap.py").write_text(blocks["gym"][1])
    monkeypatch.syspath_prepend(str(tmp_path))
    yield blocks
    registry._REGISTRY["env"].pop("try_again", None)
    for mod in [m for m in sys.modules if m == "mylab" or m.startswith("mylab.")]:
        del sys.modules[mod]


def test_the_documented_env_is_short(mylab):
    assert mylab["env"][0] == "python" and len(mylab["env"][1].strip().splitlines()) < 40


def test_the_try_again_env_runs_through_the_rollout(mylab):
    import mylab.envs  # noqa: F401  (registers try_again)

    _, tok = tiny_model_and_tokenizer()
    spec = env_spec({"env": {"name": "try_again", "max_turns": 3, "message": "No. Again."}})
    rows = [{"prompt": [{"role": "user", "content": "12*7?"}], "id": "0", "answer": "84"}]
    gen = ScriptedGenerator(tok, ["\\boxed{74}", "\\boxed{84}", "never reached"])
    b = rollout(gen, tok, spec.build(), spec, rows, 2, SamplingParams(max_new_tokens=32), 0)
    assert b.texts == ["\\boxed{84}"] * 2 and b.extras["env_turns"].tolist() == [2, 2]
    assert b.rows[0]["env_info"] == {"retries": 1.0, "solved": 1.0}
    assert [m["content"] for m in b.rows[0]["transcript"]][1:] == ["\\boxed{74}", "No. Again.", "\\boxed{84}"]
    assert len(gen.calls) == 2


def test_the_documented_run_file_validates(mylab):
    import mylab.envs  # noqa: F401
    import yaml

    run = yaml.safe_load(next(b for b in _yaml_blocks() if "name: try_again" in b))
    assert run["plugins"] == ["mylab.envs"]
    assert env_spec(run["task"]).env == {"name": "try_again", "message": "No. Again."}


def _yaml_blocks():
    import re

    text = ENGINE_DOC.read_text()
    return re.findall(r"```yaml\n(.*?)\n```", text, re.S)


def test_the_gym_wrapper_on_a_stand_in_env(mylab):
    from mylab.gym_wrap import GymText

    class Countdown:  # Gymnasium's API: done when the action is "0"
        def reset(self, seed=None):
            self.seed = seed
            return "say 0", {}

        def step(self, action):
            return "again", float(action == "0"), action == "0", False, {}

    _, tok = tiny_model_and_tokenizer()
    env = GymText(Countdown)
    spec = env_spec({"env": {"name": "calculator", "max_turns": 3}})  # only the rollout limits are used
    rows = [{"prompt": [{"role": "system", "content": "Play."}], "id": "0"}]
    b = rollout(ScriptedGenerator(tok, ["1", "0"]), tok, env, spec, rows, 1, SamplingParams(max_new_tokens=8), 0)
    assert b.rows[0]["env_info"] == {"reward": 1.0} and b.extras["env_turns"].tolist() == [2]
    assert [m["content"] for m in b.rows[0]["transcript"]] == ["Play.", "say 0", "1", "again", "0"]
