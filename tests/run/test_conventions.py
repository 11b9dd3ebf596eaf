"""The conventions engine v2 fixed, each with its value before and after the change:
one accuracy definition (NaN left out, counted), one masked-std convention (unbiased), and
transformers' LR schedules instead of a hand-written lambda."""

import math

import pytest
import torch

from zoo.config.run import RunConfig
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.rewards.compute import accuracy_metrics
from zoo.run.evaluate import evaluate
from zoo.run.setup import _scheduler
from zoo.step.advantages import advantage, kl_reward, normalize
from zoo.step.types import Slots


def lrs(schedule: str, warmup: int, total: int) -> list[float]:
    cfg = RunConfig(optim={"lr": 1.0, "schedule": schedule, "warmup_steps": warmup})
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sch = _scheduler(opt, cfg, total)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])  # the lr this optimizer step uses
        opt.step()
        sch.step()
    return out


def test_warmup_starts_from_zero_as_transformers_does():
    # before (hand-written lambda): (i + 1) / warmup -> [0.5, 1.0, 1.0, 1.0]
    # after (transformers.get_scheduler "constant_with_warmup"): i / warmup -> [0.0, 0.5, 1.0, 1.0]
    assert lrs("constant", 2, 4) == pytest.approx([0.0, 0.5, 1.0, 1.0])


def test_linear_and_cosine_decay_unchanged_without_warmup():
    assert lrs("linear", 0, 4) == pytest.approx([1.0, 0.75, 0.5, 0.25])
    assert lrs("cosine", 0, 4) == pytest.approx([0.5 * (1 + math.cos(math.pi * i / 4)) for i in range(4)])
    assert lrs("constant", 0, 3) == pytest.approx([1.0, 1.0, 1.0])


def test_train_accuracy_leaves_out_unscored_rows_and_counts_them():
    nan = float("nan")
    obj = torch.tensor([[1.0, 0.5], [nan, 1.0], [0.0, 0.0], [1.0, 1.0]])  # [N, K]: correctness, format
    from zoo.core import registry

    m = accuracy_metrics(obj, [registry.build("reward", "correctness"), registry.build("reward", "format")])
    # before: mean over per-row flags with NaN propagating -> accuracy NaN for the whole step
    assert m == {"accuracy": pytest.approx(2 / 3), "accuracy/unscored": 1.0}
    assert accuracy_metrics(obj, [registry.build("reward", "format"), registry.build("reward", "length")]) == {}


def test_eval_accuracy_leaves_out_unscored_completions():
    model, tok = tiny_model_and_tokenizer()
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}, {"prompt": "c", "answer": "3"}]
    verdicts = {"a": 1.0, "b": None, "c": 0.0}  # the reward cannot score row b

    def correctness(texts, rws):
        return [verdicts[r["prompt"]] for r in rws]

    from zoo.backends.generate.hf_generator import HFGenerator

    res = evaluate(
        HFGenerator(model, tok), tok, rows, correctness, max_new_tokens=2, samples=2, temperature=1.0, seed=0
    )
    # before: None counted as wrong, 1 of 3 -> 0.333; after: 1 of the 2 scored
    assert res["eval/greedy_acc"] == pytest.approx(0.5)
    assert res["eval/avg_at_k"] == pytest.approx(0.5)
    assert res["eval/unscored"] == 3.0  # 1 greedy + 2 samples of row b


def test_adv_std_metric_is_the_unbiased_masked_std():
    from zoo.config.variant import load_variant
    from zoo.core.batch import Batch

    mask = torch.tensor([[True, True], [True, False], [True, True]])  # 5 real tokens
    scores = torch.tensor([1.0, 0.0, 0.5])
    b = Batch(
        prompt_ids=torch.zeros(3, 1, dtype=torch.long),
        prompt_mask=torch.ones(3, 1, dtype=torch.bool),
        completion_ids=torch.zeros(3, 2, dtype=torch.long),
        loss_mask=mask,
        group_ids=torch.tensor([0, 0, 0]),
        truncated=torch.zeros(3, dtype=torch.bool),
        lengths=mask.sum(1),
        scores=scores,
    )
    slots = Slots.of(load_variant("grpo", {"kl": "none", "normalizer": "none"}))
    b, _ = kl_reward(b, slots, {})
    _, m = normalize(advantage(b, slots), slots)
    adv = torch.tensor([0.5, 0.5, -0.5, 0.0, 0.0])  # r - mean(r) on each real token
    mu = float(adv.mean())
    unbiased = math.sqrt(float(((adv - mu) ** 2).sum()) / 4)  # 0.4472 (before: /5 -> 0.4)
    assert m["adv/std"] == pytest.approx(unbiased, abs=1e-6)
