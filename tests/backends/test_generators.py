"""The `generator` kind: logp_rollout is the log-prob of the distribution the sampler drew
from, one contract suite every built-in generator passes, `noisy` wraps its inner generator, and the
run resolves `sampling.backend` once, records it in the fingerprint and syncs after optimizer steps."""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from zoo.config.run import RunConfig
from zoo.config.variant import VariantError
from zoo.core import registry
from zoo.core.generator_types import SamplingParams
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.logprobs import token_logprobs

ALL_BUILTIN = [
    n for n in registry.available("generator") if registry.get("generator", n).fn.__module__.startswith("zoo.")
]
# vllm cannot run the fake models below (custom forwards): its contract suite is tests/backends/test_vllm.py
BUILTIN = [n for n in ALL_BUILTIN if n != "vllm"]


def test_the_builtin_generators_are_hf_noisy_and_vllm():
    assert ALL_BUILTIN == ["hf", "noisy", "vllm"]


# --------------------------------------------------------------------------- fake models
class FixedLogits(LlamaForCausalLM):
    """A Llama whose logits are `fixed` [V] at every position, whatever the input."""

    def __init__(self, config, fixed: torch.Tensor):
        super().__init__(config)
        self.register_buffer("fixed", fixed.float())

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = self.fixed.to(out.logits.dtype).expand_as(out.logits).clone()
        return out


class Counting(LlamaForCausalLM):
    """A Llama that (almost surely) writes the token `shift` ids after its input, and EOS after 'e':
    with the character tokenizer, prefix '...a' continues 'bcde<EOS>' and '...0' continues '123456...'.
    `shift` is a parameter, so changing it in place is a weight update."""

    def __init__(self, config, eos: int, e_id: int):
        super().__init__(config)
        self.shift = torch.nn.Parameter(torch.tensor(1.0))
        self.eos, self.e_id = eos, e_id

    def forward(self, input_ids=None, *args, **kwargs):
        out = super().forward(input_ids, *args, **kwargs)
        ids = input_ids[:, -out.logits.shape[1] :]  # [B, L] the positions whose logits are returned
        nxt = (ids + int(self.shift.detach().round())).clamp(max=out.logits.shape[-1] - 1)
        nxt = torch.where(ids == self.e_id, torch.full_like(ids, self.eos), nxt)
        logits = torch.full_like(out.logits, -30.0)
        out.logits = logits.scatter(-1, nxt[..., None], 30.0)
        return out


def _llama_config(vocab: int, pad: int, eos: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=pad,
        eos_token_id=eos,
        bos_token_id=None,
    )


def four_token_model_and_tokenizer():
    """Vocabulary a=0, b=1, <eos>=2, <pad>=3; logits [1.0, 0.8, 0.2, -1.0] at every position."""
    vocab = {"a": 0, "b": 1, "<eos>": 2, "<pad>": 3}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<pad>", padding_side="left")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = FixedLogits(_llama_config(4, pad=3, eos=2), torch.tensor([1.0, 0.8, 0.2, -1.0]))
    return model, tok


def counting_model_and_tokenizer():
    _, tok = tiny_model_and_tokenizer(seed=0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Counting(
            _llama_config(len(tok), pad=tok.pad_token_id, eos=tok.eos_token_id),
            tok.eos_token_id,
            tok.convert_tokens_to_ids("e"),
        )
    return model, tok


def _gen(name, model, tok, **params):
    return registry.build("generator", {"name": name, **params})(model, tok)


# --------------------------------------------------------------------------- logp_rollout by hand
def test_logp_rollout_is_the_warped_distribution_temperature_then_top_p():
    # logits z = [1.0, 0.8, 0.2, -1.0] (tokens a, b, <eos>, <pad>), temperature 0.5 -> z/T = [2, 1.6, 0.4, -2];
    # softmax: e^2 = 7.389, e^1.6 = 4.953, e^0.4 = 1.492, e^-2 = 0.135, sum 13.969 ->
    #   p = [0.5290, 0.3546, 0.1068, 0.0097].
    # top-p 0.7 (transformers: sort ascending, drop tokens whose cumulative prob <= 1 - 0.7 = 0.3):
    #   ascending cumsum [0.0097 (<pad>), 0.1165 (<eos>), 0.4710 (b), 1.0 (a)] -> <pad> and <eos> dropped.
    # Renormalised over {a, b}: log p(a) = 2 - log(e^2 + e^1.6) = -log(1 + e^-0.4) = -0.51302,
    #                           log p(b) = -log(1 + e^0.4) = -0.91302.
    # <eos> is never drawn, so every row runs to the budget (truncated).
    model, tok = four_token_model_and_tokenizer()
    torch.manual_seed(0)
    b = _gen("hf", model, tok).generate(["ab", "a"], 4, SamplingParams(max_new_tokens=6, temperature=0.5, top_p=0.7))
    assert b.completion_ids.shape == (8, 6) and bool(b.truncated.all()) and bool(b.loss_mask.all())
    assert set(b.completion_ids.unique().tolist()) == {0, 1}  # both kept tokens drawn, nothing else
    want = torch.where(b.completion_ids == 0, -math.log1p(math.exp(-0.4)), -math.log1p(math.exp(0.4)))
    torch.testing.assert_close(b.logp_rollout, want.float(), atol=1e-5, rtol=0)


def test_logp_rollout_with_temperature_only_is_the_tempered_softmax():
    # temperature 0.5, no top-p: log p = z/T - logsumexp(z/T), logsumexp([2, 1.6, 0.4, -2]) = log 13.969 = 2.63686
    # -> [-0.63686, -1.03686, -2.23686, -4.63686]; <eos> (p = 0.107) ends some rows, and there the mask stops.
    model, tok = four_token_model_and_tokenizer()
    torch.manual_seed(1)
    b = _gen("hf", model, tok).generate(["ab"], 16, SamplingParams(max_new_tokens=8, temperature=0.5))
    table = torch.tensor([-0.63686, -1.03686, -2.23686, -4.63686])
    want = table[b.completion_ids] * b.loss_mask
    torch.testing.assert_close(b.logp_rollout, want, atol=1e-4, rtol=0)
    assert bool((~b.truncated).any())  # some row drew <eos>: its logp (-2.237) is in, the padding after is 0


# --------------------------------------------------------------------------- the contract suite
@pytest.mark.parametrize("name", BUILTIN)
def test_generate_contract_shapes_masks_truncation(name):
    model, tok = counting_model_and_tokenizer()
    torch.manual_seed(0)
    b = _gen(name, model, tok).generate(["xyza", "0"], 2, SamplingParams(max_new_tokens=6))
    # prompt-major: rows 0, 1 answer 'xyza' (-> 'bcde' EOS, 5 tokens), rows 2, 3 answer '0' (-> '123456', cut)
    N, T = 4, 6
    assert b.completion_ids.shape == b.loss_mask.shape == b.logp_rollout.shape == (N, T)
    assert b.group_ids.tolist() == [0, 0, 1, 1] and b.prompt_ids.shape[0] == N
    assert b.lengths.tolist() == [5, 5, 6, 6] and b.truncated.tolist() == [False, False, True, True]
    assert b.texts == ["bcde", "bcde", "123456", "123456"]
    assert b.loss_mask[0].tolist() == [True] * 5 + [False]
    assert b.logp_rollout.dtype == torch.float32 and bool(torch.isfinite(b.logp_rollout).all())
    assert bool((b.logp_rollout[~b.loss_mask] == 0).all())  # 0 off the mask
    assert bool((b.logp_rollout[b.loss_mask] > -1e-3).all())  # a near-certain token each time: log p ~ 0


@pytest.mark.parametrize("name", BUILTIN)
def test_continue_from_uneven_prefixes_with_a_stop_string_across_tokens(name):
    model, tok = counting_model_and_tokenizer()
    enc = [tok(s, add_special_tokens=False)["input_ids"] for s in ("xyza", "a", "90", "c")]  # lengths 4, 1, 2, 1
    torch.manual_seed(0)
    c = _gen(name, model, tok).continue_(enc, SamplingParams(max_new_tokens=6), ["cd"])
    # 'xyza' and 'a' -> b, c, d: the stop 'cd' spans the tokens 'c' and 'd' and ends the row at 'd';
    # '90' -> 1..6, the budget (truncated); 'c' -> d, e, EOS: 'c' + 'd' spans the prefix, which is never
    # searched, so that row ends at its EOS
    assert c.lengths.tolist() == [3, 3, 6, 3] and c.truncated.tolist() == [False, False, True, False]
    assert c.texts == ["bcd", "bcd", "123456", "de"] and c.stopped_by == ["cd", "cd", None, None]
    assert c.ids.shape == c.mask.shape == c.logp_rollout.shape == (4, 6)
    assert c.ids[0, :3].tolist() == tok("bcd", add_special_tokens=False)["input_ids"]
    assert bool((c.ids[~c.mask] == tok.pad_token_id).all()) and bool((c.logp_rollout[~c.mask] == 0).all())
    assert int(c.ids[3, 2]) == tok.eos_token_id and bool(c.mask[3, 2])  # the EOS is a new token of its row


@pytest.mark.parametrize("name", BUILTIN)
def test_sync_after_a_weight_change_samples_with_the_new_weights(name):
    model, tok = counting_model_and_tokenizer()
    gen = _gen(name, model, tok)
    a = tok("a", add_special_tokens=False)["input_ids"]
    assert gen.continue_([a], SamplingParams(max_new_tokens=4), []).texts == ["bcde"]
    with torch.no_grad():
        model.shift.fill_(2.0)  # an optimizer step, in place: now 'a' -> c, e, EOS
    gen.sync(model)
    assert gen.continue_([a], SamplingParams(max_new_tokens=4), []).texts == ["ce"]


def test_stop_strings_must_be_non_empty():
    model, tok = counting_model_and_tokenizer()
    with pytest.raises(ValueError, match="non-empty"):
        _gen("hf", model, tok).continue_([[15]], SamplingParams(max_new_tokens=2), [""])


# --------------------------------------------------------------------------- against the policy
@pytest.mark.parametrize("temperature,do_sample", [(1.0, True), (0.7, True), (0.7, False)])
def test_unwarped_logp_rollout_equals_the_policys_forward(temperature, do_sample):
    model, tok = tiny_model_and_tokenizer(seed=0)
    torch.manual_seed(0)
    b = _gen("hf", model, tok).generate(
        ["ab", "hello"], 3, SamplingParams(max_new_tokens=10, temperature=temperature, do_sample=do_sample)
    )
    with torch.no_grad():
        lp, _ = token_logprobs(
            model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1], temperature=temperature
        )
    torch.testing.assert_close(b.logp_rollout, lp * b.loss_mask, atol=1e-4, rtol=0)


def test_noisy_with_sigma_0_equals_its_inner():
    model, tok = tiny_model_and_tokenizer(seed=0)
    sp = SamplingParams(max_new_tokens=10, temperature=0.8, top_p=0.9)
    torch.manual_seed(3)
    inner = _gen("hf", model, tok).generate(["ab", "hello"], 3, sp)
    torch.manual_seed(3)
    noisy = _gen("noisy", model, tok, sigma=0.0).generate(["ab", "hello"], 3, sp)
    assert torch.equal(noisy.completion_ids, inner.completion_ids) and noisy.texts == inner.texts
    assert torch.equal(noisy.logp_rollout, inner.logp_rollout)


def test_noisy_logp_rollout_differs_two_sidedly_and_is_seeded():
    model, tok = tiny_model_and_tokenizer(seed=0)
    sp = SamplingParams(max_new_tokens=12)

    def draw(seed):
        torch.manual_seed(0)
        return _gen("noisy", model, tok, sigma=1.0, seed=seed).generate(["ab", "hello"], 4, sp)

    b = draw(0)
    with torch.no_grad():
        lp, _ = token_logprobs(model, b.input_ids(), b.attention_mask(), b.completion_ids.shape[1])
    d = (b.logp_rollout - lp)[b.loss_mask]  # log pi_rollout - log pi_policy on the drawn tokens
    assert float(d.min()) < -0.1 and float(d.max()) > 0.1  # both sides, not top-p's one-sided cut
    again = draw(0)
    assert torch.equal(again.completion_ids, b.completion_ids) and torch.equal(again.logp_rollout, b.logp_rollout)
    assert not torch.equal(draw(1).logp_rollout, b.logp_rollout)  # another noise seed, another draw


def test_noisy_rejects_a_negative_sigma_and_an_unknown_inner():
    with pytest.raises(registry.ComponentError, match="sigma must be a finite number >= 0"):
        registry.build("generator", {"name": "noisy", "sigma": -1.0})
    with pytest.raises(registry.ComponentError, match="known: hf, noisy, vllm"):
        registry.build("generator", {"name": "noisy", "inner": "sglang"})


# --------------------------------------------------------------------------- the run
def test_an_unknown_backend_is_a_run_error_listing_the_known_ones():
    from zoo.run.trainer import validate_run

    with pytest.raises(
        VariantError,
        match=r"sampling.backend: generator 'sglang' is not registered; "
        r"known: hf, noisy, vllm",
    ):
        validate_run(RunConfig(sampling={"backend": "sglang"}))
    with pytest.raises(
        VariantError,
        match=r"sampling.backend: generator 'noisy': unknown parameter 'sgima' "
        r"\(did you mean 'sigma'\?\)",
    ):
        validate_run(RunConfig(sampling={"backend": {"name": "noisy", "sgima": 0.1}}))
    from zoo.config.run import effective_variant
    from zoo.study.validate import run_checks  # what `zoo validate` reports per arm

    cfg = RunConfig(sampling={"backend": "sglang"})
    assert run_checks(cfg, effective_variant(cfg)) == [
        "sampling.backend: generator 'sglang' is not registered; known: hf, noisy, vllm"
    ]
    ok = RunConfig(sampling={"backend": {"name": "noisy", "sigma": 0.5}})
    assert run_checks(ok, effective_variant(ok)) == []


def test_the_fingerprint_holds_the_backend_and_its_parameters():
    from zoo.run.fingerprint import compare, fingerprint

    d_hf, f_hf = fingerprint(RunConfig())
    assert f_hf["generator"] == "hf" and "backend" not in f_hf["sampling"]  # as recorded before the kind
    assert fingerprint(RunConfig(sampling={"backend": {"name": "hf"}}))[0] == d_hf  # the same generator
    d1, f1 = fingerprint(RunConfig(sampling={"backend": "noisy"}))
    assert f1["generator"] == {"name": "noisy", "inner": "hf", "sigma": 0.1, "seed": 0}  # defaults filled in
    d2, f2 = fingerprint(RunConfig(sampling={"backend": {"name": "noisy", "sigma": 0.3}}))
    assert len({d_hf, d1, d2}) == 3 and compare(f1, f2) == ["generator.sigma"]


def test_the_run_builds_its_generator_once_and_syncs_after_each_updating_step(tiny_model_dir, tmp_path, monkeypatch):
    from conftest import tiny_run_config

    from zoo.backends.generate import noisy
    from zoo.run.trainer import train

    built, synced = [], []
    real_init = noisy.NoisyGenerator.__init__
    monkeypatch.setattr(noisy.NoisyGenerator, "__init__", lambda self, *a: (built.append(1), real_init(self, *a))[1])
    monkeypatch.setattr(noisy.NoisyGenerator, "sync", lambda self, policy: synced.append(policy))
    cfg = tiny_run_config(
        tiny_model_dir, tmp_path / "run", sampling={"backend": {"name": "noisy", "sigma": 0.5}}, eval={"enabled": False}
    )
    summary = train(cfg, progress=False)
    assert summary["status"] == "finished"
    assert len(built) == 1 and len(synced) == 2  # 2 steps, each with one applied optimizer step
    assert all(p is synced[0] for p in synced)  # the policy module


def test_select_trimmed_and_concat_carry_logp_rollout():
    from zoo.core.batch import Batch, concat

    def batch(lp, lengths, gid0):
        n, T = lp.shape
        mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
        return Batch(
            prompt_ids=torch.ones(n, 2, dtype=torch.long),
            prompt_mask=torch.ones(n, 2, dtype=torch.bool),
            completion_ids=torch.full((n, T), 7),
            loss_mask=mask,
            group_ids=torch.arange(n) + gid0,
            truncated=torch.zeros(n, dtype=torch.bool),
            lengths=torch.tensor(lengths),
            logp_rollout=lp * mask,
        )

    a = batch(torch.tensor([[-1.0, -2.0, -3.0, -4.0], [-5.0, -6.0, -7.0, -8.0]]), [2, 1], 0)  # mask ends at col 2
    assert a.select([1]).logp_rollout.tolist() == [[-5.0, 0.0, 0.0, 0.0]]
    assert a.trimmed().logp_rollout.tolist() == [[-1.0, -2.0], [-5.0, 0.0]]  # columns past the longest mask go
    b = batch(torch.tensor([[-9.0] * 5]), [5], 2)
    cat = concat([a.trimmed(), b], pad_id=0)  # a's rows padded on the right with 0
    assert cat.logp_rollout.tolist() == [[-1.0, -2.0, 0, 0, 0], [-5.0, 0, 0, 0, 0], [-9.0] * 5]
