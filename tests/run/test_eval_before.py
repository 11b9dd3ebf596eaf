"""zoo.run.eval_before: one arm computes a study's evaluation before training, an arm that finds it
being computed trains meanwhile and reads it (or computes it on its initial policy) after its last step."""

import contextlib
import json
import os

import pytest
import torch
import yaml

from zoo.models import apply_lora
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.run.eval_before import computing, initial_policy, lora_at_init
from zoo.run.eval_record import read_cached, read_record, write_cached

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def test_the_lock_is_held_by_one_holder_at_a_time(tmp_path):
    with computing(tmp_path, "k", wait=True) as first:
        assert first is True
        with computing(tmp_path, "k", wait=False) as second:  # flock is per open file: conflicts in one process too
            assert second is False
        with computing(tmp_path, "other", wait=False) as other_key:
            assert other_key is True
    with computing(tmp_path, "k", wait=False) as after:
        assert after is True


def test_initial_policy_gives_the_untrained_logits_after_the_adapters_moved():
    model, _ = tiny_model_and_tokenizer(seed=3, hidden=64, layers=2)
    ids = torch.tensor([[1, 5, 9, 4, 7]])
    with torch.no_grad():
        base = model(input_ids=ids).logits  # [1, 5, V]
    lora = apply_lora(model, LORA)
    assert lora_at_init(lora)
    with torch.no_grad():
        assert torch.equal(lora(input_ids=ids).logits, base)  # B = 0: the adapters add exactly 0
        for n, p in lora.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(n)))
        trained = lora(input_ids=ids).logits
        with initial_policy(lora) as m:
            untrained = m(input_ids=ids).logits
    assert not lora_at_init(lora) and not torch.allclose(trained, base)
    assert torch.equal(untrained, base)
    assert not lora_at_init(tiny_model_and_tokenizer(seed=3, hidden=64, layers=2)[0])  # no adapters: not deferrable


def _lora_study(tmp_path, tiny_model_dir, lora=True):
    from test_study_e2e import _study

    path = _study(tmp_path, tiny_model_dir, ["grpo"], wandb=False)
    data = yaml.safe_load(path.read_text())
    if lora:
        data["model_opts"] = {"lora": LORA}
    path.write_text(yaml.safe_dump(data))
    return path, tmp_path / "runs" / "tiny-study"


def _fake_other_arm(monkeypatch, writes: dict | None):
    """Replace the lock with one another arm holds until this arm waits for it; on that wait the other arm
    has written `writes` (the cached metrics), or nothing (it died). Returns the list of `wait` flags seen."""
    import zoo.run.progress as rp

    seen: list[bool] = []

    @contextlib.contextmanager
    def fake(study_dir, key, *, wait):
        seen.append(wait)
        if wait and writes is not None:
            write_cached(study_dir, key, writes, {}, {"by": "the other arm"})
        yield wait

    monkeypatch.setattr(rp, "computing", fake)
    return seen


def _run(path):
    from rich.console import Console

    from zoo.study import experiment, runner

    return runner.run_study(experiment.load_study(path), console=Console(file=open(os.devnull, "w")))


def _phase0(arm_dir):
    recs = [json.loads(line) for line in (arm_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if r.get("eval/phase") == 0.0]


@pytest.mark.e2e
def test_a_deferred_arm_trains_first_and_reads_the_other_arms_result(tmp_path, tiny_model_dir, monkeypatch):
    import zoo.run.progress as rp

    path, root = _lora_study(tmp_path, tiny_model_dir)
    seen = _fake_other_arm(monkeypatch, {"eval/greedy_acc": 0.123})
    calls = []
    real = rp.evaluate
    monkeypatch.setattr(rp, "evaluate", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert _run(path) == 0
    assert seen == [False, True]  # tried at step 0 without waiting, waited after training
    assert len(calls) == 1  # only the evaluation after training: the one before was read
    summary = json.loads((root / "grpo-s0" / "summary.json").read_text())
    assert summary["eval/before"] == {"eval/greedy_acc": 0.123} and summary["status"] == "finished"
    assert [r["eval/greedy_acc"] for r in _phase0(root / "grpo-s0")] == [0.123]


@pytest.mark.e2e
def test_when_the_other_arm_left_nothing_the_arm_evaluates_its_initial_policy(tmp_path, tiny_model_dir, monkeypatch):
    import zoo.run.progress as rp

    path, root = _lora_study(tmp_path, tiny_model_dir)
    seen = _fake_other_arm(monkeypatch, None)
    entered = []
    real = rp.initial_policy

    @contextlib.contextmanager
    def spy(model):
        with real(model) as m:
            entered.append(all(m.disable_adapters for m in model.modules() if hasattr(m, "lora_A")))
            yield m

    monkeypatch.setattr(rp, "initial_policy", spy)
    assert _run(path) == 0
    assert seen == [False, True] and entered == [True]  # computed late, with the adapters disabled
    summary = json.loads((root / "grpo-s0" / "summary.json").read_text())
    (cached,) = [read_cached(root, p.stem) for p in (root / "eval_before").glob("*.json")]
    assert summary["eval/before"] == cached["metrics"] and "eval/greedy_acc" in cached["metrics"]
    assert read_record(root / "grpo-s0")["before"] == cached["scores"] and len(cached["scores"]) == 2
    assert len(_phase0(root / "grpo-s0")) == 1


@pytest.mark.e2e
def test_a_full_fine_tuning_arm_waits_for_the_lock_instead(tmp_path, tiny_model_dir, monkeypatch):
    path, root = _lora_study(tmp_path, tiny_model_dir, lora=False)
    seen = _fake_other_arm(monkeypatch, {"eval/greedy_acc": 0.5})
    assert _run(path) == 0
    assert seen == [True]  # its initial weights are gone after training: it cannot defer
    assert json.loads((root / "grpo-s0" / "summary.json").read_text())["eval/before"] == {"eval/greedy_acc": 0.5}
