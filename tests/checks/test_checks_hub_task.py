"""A task on the Hub that cannot be reached from here: `zoo validate` notes it instead of refusing
the file (the GSM8K recipes validate offline), while a missing local data file is still an error."""

import pytest

from zoo.checks.inputs import hub_dataset, task
from zoo.checks.registry import Report


@pytest.mark.parametrize(
    "path, hub",
    [("openai/gsm8k", True), ("gsm8k", True), ("data/train.jsonl", False), ("a/b/c", False), ("./x", False)],
)
def test_what_counts_as_a_hub_dataset(path, hub):
    assert (hub_dataset({"name": "hf", "path": path}) == path) is hub
    assert hub_dataset({"name": "reasoning_gym", "dataset": path}) is None


def _check(spec, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rep = Report()
    task(SimpleNamespace(cfg=SimpleNamespace(task=spec)), rep)
    return rep


def test_an_unreachable_hub_dataset_is_a_note_not_an_error(monkeypatch):
    rep = _check({"name": "hf", "path": "nobody-here/no-such-dataset-zoo-test", "answer_column": "answer"}, monkeypatch)
    assert rep.ok and len(rep.notes) == 1 and "no-such-dataset-zoo-test" in rep.notes[0] and "zoo run" in rep.notes[0]


def test_a_missing_local_data_file_is_still_an_error(monkeypatch, tmp_path):
    rep = _check({"name": "hf", "path": str(tmp_path / "missing.jsonl")}, monkeypatch)
    assert not rep.ok and rep.errors[0].startswith("task: ") and not rep.notes
