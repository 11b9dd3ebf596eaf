"""Evaluation through the generator: `eval.backend` (default: the run's `sampling.backend`, a wrapper such
as `noisy` through the generator it wraps). The `hf` generator's evaluation is the direct HF path's
(the path before `eval.backend` existed), greedy and sampled, token for token."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from zoo.backends.generate.backend import build_generator, eval_generator
from zoo.backends.generate.hf import generate_rollout
from zoo.backends.generate.hf_generator import HFGenerator
from zoo.config.run import RunConfig
from zoo.config.variant import VariantError
from zoo.core.declarations import Declaration
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.run.evaluate import evaluate

ROWS = [{"prompt": p, "answer": "x"} for p in ("ab", "abc", "b", "ca", "cab")]
MAX_NEW, K, TEMP, SEED, BATCH = 5, 3, 1.0, 7, 4


class Recorder:
    """A correctness reward that records the texts it is asked to score (1.0 for the first row)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.decl = Declaration(accuracy=True)

    def __call__(self, texts, rows):
        self.calls.append(list(texts))
        return [1.0 if r is ROWS[0] else 0.0 for r in rows]


def direct_hf_texts(model, tok, batch: int = BATCH) -> list[list[str]]:
    """What evaluation sampled before it went through a generator: HF generate on the policy."""
    prompts = [r["prompt"] for r in ROWS]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        g = generate_rollout(
            model, tok, prompts, group_size=1, max_new_tokens=MAX_NEW, do_sample=False, micro_batch=batch
        )
        s = generate_rollout(
            model, tok, prompts, group_size=K, max_new_tokens=MAX_NEW, temperature=TEMP, micro_batch=batch
        )
    return [g.texts, s.texts]


def eval_texts(gen, tok) -> list[list[str]]:
    rec = Recorder()
    evaluate(gen, tok, ROWS, rec, max_new_tokens=MAX_NEW, samples=K, temperature=TEMP, seed=SEED, batch_size=BATCH)
    return rec.calls


def test_hf_evaluation_is_the_direct_hf_path_token_for_token():
    model, tok = tiny_model_and_tokenizer()
    before = direct_hf_texts(model, tok)
    assert len(before[0]) == 5 and len(before[1]) == 15 and len(set(before[1])) > 1  # sampled, not all alike
    assert eval_texts(HFGenerator(model, tok), tok) == before


def test_noisy_is_evaluated_through_its_inner_generator():
    model, tok = tiny_model_and_tokenizer()
    noisy = build_generator({"name": "noisy", "sigma": 20.0}, model, tok)
    inner = eval_generator(noisy)
    assert isinstance(inner, HFGenerator) and inner is noisy.inner
    assert eval_texts(inner, tok) == direct_hf_texts(model, tok)  # rollout_correction's eval numbers do not move
    assert eval_texts(noisy, tok) != direct_hf_texts(model, tok)  # the noise would have changed them
    hf = HFGenerator(model, tok)
    assert eval_generator(hf) is hf


def evaluator_state(model, tok, backend, eval_backend):
    """The parts of a RunState the run's evaluator reads."""
    cfg = RunConfig.model_validate(
        {
            "sampling": {"backend": backend},
            "budget": {"max_new_tokens": MAX_NEW, "micro_batch": 2},
            "eval": {
                "size": 5,
                "samples": K,
                "seed": SEED,
                "temperature": TEMP,
                **({"backend": eval_backend} if eval_backend else {}),
            },
        }
    )
    return SimpleNamespace(
        cfg=cfg,
        rewards=[(Recorder(), 1.0)],
        task=SimpleNamespace(eval=ROWS),
        step=0,
        models=SimpleNamespace(policy=model, tokenizer=tok, parallel=None),
        settings=SimpleNamespace(autocast="none"),
        device=torch.device("cpu"),
        generator=build_generator(backend, model, tok),
    )


@pytest.mark.parametrize(
    "backend, eval_backend, same_as_hf",
    [
        ("hf", None, True),
        ({"name": "noisy", "sigma": 20.0}, None, True),  # the run's generator's inner
        ("hf", {"name": "noisy", "sigma": 20.0}, False),  # its own generator, as asked
    ],
)
def test_the_runs_evaluator_samples_with_eval_backend(backend, eval_backend, same_as_hf):
    from zoo.run.progress import evaluator

    model, tok = tiny_model_and_tokenizer()
    st = evaluator_state(model, tok, backend, eval_backend)
    res = evaluator(st)()
    texts = st.rewards[0][0].calls  # [greedy texts, sampled texts]
    hf = direct_hf_texts(model, tok, batch=st.cfg.eval.batch_size)  # eval.batch_size (16), not budget.micro_batch
    assert res["eval/n"] == 5.0 and res["eval/k"] == float(K)
    assert (texts == hf) == same_as_hf


def test_an_unknown_eval_backend_is_refused_before_any_model_loads():
    from zoo.run.trainer import validate_run

    cfg = RunConfig.model_validate({"eval": {"backend": "noisyy"}})
    with pytest.raises(VariantError, match=r"eval\.backend: .*noisy"):
        validate_run(cfg)


def test_samples_zero_scores_greedy_only():
    """eval.samples 0: one greedy completion per prompt is generated and scored (the same texts as
    with k samples), no sampled ones; greedy accuracy is 1 of 5 rows and eval/avg_at_k is absent."""
    model, tok = tiny_model_and_tokenizer()
    calls: list[list[str]] = []

    def first_row_right(texts, rows):  # 1.0 for the first row (by its prompt: evaluation passes copies)
        calls.append(list(texts))
        return [1.0 if r["prompt"] == ROWS[0]["prompt"] else 0.0 for r in rows]

    first_row_right.decl = Declaration(accuracy=True)
    res = evaluate(
        HFGenerator(model, tok),
        tok,
        ROWS,
        first_row_right,
        max_new_tokens=MAX_NEW,
        samples=0,
        temperature=TEMP,
        seed=SEED,
        batch_size=BATCH,
    )
    assert calls == [direct_hf_texts(model, tok)[0]]
    assert res["eval/greedy_acc"] == pytest.approx(0.2, rel=1e-6) and "eval/avg_at_k" not in res
    assert res["eval/k"] == 0.0 and res["eval/n"] == 5.0 and res["eval/unscored"] == 0.0
    assert RunConfig.model_validate({"name": "r", "variant": "grpo", "eval": {"samples": 0}}).eval.samples == 0
