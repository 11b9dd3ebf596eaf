"""A teacher given as a Hub id that cannot be read here (not in the local HF cache, and offline or the
Hub unreachable) is one line at once from `zoo validate` (and `zoo run`'s same check), not ~30 s of
transformers' retries and then "could not load the tokenizers" (zoo/models/hub.py, zoo/checks/inputs.py)."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from zoo.cli import app

runner = CliRunner()
NOT_CACHED = "zoo-tests-nobody/no-such-teacher"  # shaped like a Hub id, in no cache


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def unreachable(monkeypatch):
    """Online mode, but no route to the Hub (a machine without network that did not set HF_HUB_OFFLINE)."""
    from zoo.models import hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: False)

    def no_network(*a, **kw):  # transformers must not be asked: it would retry for ~30 s
        raise AssertionError(f"from_pretrained{a} reached while the Hub is unreachable")

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", no_network)


def test_validate_says_an_offline_teacher_hub_id_in_one_line(tmp_path, tiny_model_dir, offline):
    f = tmp_path / "distill.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "variant": "on_policy_distill",
                "model": str(tiny_model_dir),
                "teacher": {"model": NOT_CACHED},
                "task": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 16, "eval_size": 4},
                "budget": {"steps": 1, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
            }
        )
    )
    r = runner.invoke(app, ["validate", str(f), "--json"])
    errors = json.loads(r.stdout)[0]["errors"]
    assert r.exit_code == 1
    assert [e for e in errors if "teacher.model" in e] == [
        f"arm run: teacher.model: {NOT_CACHED!r} is a Hugging Face Hub id that is not in the local HF cache "
        f"({_cache()}), and HF_HUB_OFFLINE is set, so only the local cache is read: give a local model "
        f"directory, or download it first where the Hub is reachable (huggingface-cli download {NOT_CACHED}) "
        "and copy the cache here"
    ]


def _cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def test_an_unreachable_hub_is_named_without_asking_transformers(tiny_model_dir, unreachable):
    from zoo.checks.inputs import tokenizer_errors

    (line,) = tokenizer_errors(str(tiny_model_dir), NOT_CACHED)
    assert line.startswith(f"teacher.model: {NOT_CACHED!r} is a Hugging Face Hub id that is not in the local HF cache")
    assert "the Hub (huggingface.co) cannot be reached from here" in line


def test_a_missing_local_teacher_is_named_like_the_policy(tiny_model_dir, offline):
    from zoo.checks.inputs import tokenizer_errors

    assert tokenizer_errors(str(tiny_model_dir), "/no/such/teacher") == [
        "teacher.model: local path '/no/such/teacher' does not exist"
    ]


def test_local_teachers_still_compare_and_a_cached_id_reads_the_cache_only(tiny_model_dir, monkeypatch):
    from zoo.checks.inputs import tokenizer_errors
    from zoo.models import hub

    assert tokenizer_errors(str(tiny_model_dir), str(tiny_model_dir)) == []  # the same tokenizer
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: False)
    assert hub.load_kwargs(str(tiny_model_dir)) == {}  # a local directory: the Hub is not asked
    assert hub.load_kwargs("owner/cached-model") == {"local_files_only": True}
    monkeypatch.setattr(hub, "cached", lambda repo_id: True)
    assert hub.hub_error("owner/cached-model", "teacher.model") is None  # loads from the cache
