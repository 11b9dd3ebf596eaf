"""zoo.backends.generate.hf (masks C6, generation), zoo.models.forward (position ids C10), zoo.step.logprobs (log-probs)."""

import pytest
import torch
from torch import nn

from zoo.backends.generate.hf import completion_mask, encode_prompts, generate_rollout
from zoo.core.batch import Batch
from zoo.models.forward import position_ids_from_mask
from zoo.models.tiny import tiny_model_and_tokenizer
from zoo.step.logprobs import token_logprobs

CHAT = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "What is 12 + 30?"}]]


def eos_biased(model, eos_id: int, bias: float = 2.5):
    """Give the tiny random model an lm_head bias towards EOS so some completions finish early."""
    old = model.lm_head
    head = nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[eos_id] = bias
    model.lm_head = head
    return model


def naive_logprobs(model, ids, mask, T, temperature=1.0):
    """Full-vocabulary reference: log_softmax(logits / temperature) gathered, [N, T] and full [N, T, V]."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    full = torch.log_softmax(logits[:, -T - 1 : -1].float() / temperature, dim=-1)
    return full.gather(-1, ids[:, -T:].unsqueeze(-1)).squeeze(-1), full


# ---------------------------------------------------------------- C10 position ids
def test_c10_position_ids():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]]
    with pytest.raises(ValueError):
        position_ids_from_mask(torch.ones(5))


def test_c10_logprobs_same_padded_or_alone():
    model, tok = tiny_model_and_tokenizer(seed=1)
    ids, mask = encode_prompts(tok, ["ab", "a much longer prompt here"])  # [2, P], row 0 left-padded
    assert mask[0].sum() < mask[1].sum()
    g = torch.Generator().manual_seed(0)
    completion = torch.randint(5, len(tok), (2, 7), generator=g)  # [2, T]
    full_ids = torch.cat([ids, completion], 1)
    full_mask = torch.cat([mask, torch.ones_like(completion)], 1)
    batched, _ = token_logprobs(model, full_ids, full_mask, 7)
    for i in range(2):
        real = mask[i].bool()
        alone_ids = torch.cat([ids[i, real], completion[i]])[None]  # no padding at all
        alone, _ = token_logprobs(model, alone_ids, torch.ones_like(alone_ids), 7)
        torch.testing.assert_close(batched[i], alone[0], atol=1e-5, rtol=0)


# ---------------------------------------------------------------- C6 completion mask
@pytest.mark.parametrize("pad_equals_eos", [True, False])
def test_c6_completion_mask(pad_equals_eos):
    EOS, t = 2, 7
    pad = EOS if pad_equals_eos else 0
    ids = torch.tensor([[t, EOS, pad, pad], [t, t, t, EOS]])
    mask, truncated, lengths = completion_mask(ids, EOS)
    assert mask.dtype == torch.bool
    assert mask.long().tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert truncated.tolist() == [False, False]
    assert lengths.tolist() == [2, 4]


def test_completion_mask_truncation_and_several_eos_ids():
    ids = torch.tensor([[5, 6, 7, 8], [5, 9, 2, 0], [3, 3, 3, 3]])
    mask, truncated, lengths = completion_mask(ids, {2, 9})
    assert mask.long().tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert truncated.tolist() == [True, False, True]
    assert lengths.tolist() == [4, 2, 4]
    with pytest.raises(ValueError):
        completion_mask(ids[0], 2)
    with pytest.raises(ValueError):
        completion_mask(ids, [])


# ---------------------------------------------------------------- generation
@pytest.mark.parametrize("pad_equals_eos", [True, False])
def test_generate_rollout_shapes_truncation_and_order(pad_equals_eos):
    model, tok = tiny_model_and_tokenizer(seed=0, pad_equals_eos=pad_equals_eos)
    eos_biased(model, tok.eos_token_id)
    model.train()
    torch.manual_seed(0)
    G, max_new = 8, 6
    r = generate_rollout(model, tok, CHAT, group_size=G, max_new_tokens=max_new)
    N = len(CHAT) * G
    assert model.training  # mode restored
    assert r.size == N
    assert r.prompt_ids.shape == r.prompt_mask.shape and r.prompt_ids.shape[0] == N
    assert r.completion_ids.shape[1] <= max_new
    assert r.input_ids().shape == (N, r.prompt_ids.shape[1] + r.completion_ids.shape[1])
    assert r.attention_mask().shape == r.input_ids().shape
    # prompt-major: rows p*G .. p*G+G-1 are prompt p
    assert r.group_ids.tolist() == [p for p in range(len(CHAT)) for _ in range(G)]
    ids, mask = encode_prompts(tok, CHAT)
    assert torch.equal(r.prompt_ids, ids.repeat_interleave(G, 0))
    # truncation flags come from generation: truncated rows have no EOS and run to max_new_tokens
    eos = tok.eos_token_id
    has_eos = (r.completion_ids == eos).any(1)
    assert torch.equal(r.truncated, ~has_eos)
    assert 0 < int(r.truncated.sum()) < N, "seed should give both finished and truncated rows"
    assert r.completion_ids.shape[1] == max_new
    assert (r.lengths[r.truncated] == max_new).all()
    for i in range(N):
        L = int(r.lengths[i])
        assert r.loss_mask[i, :L].all() and not r.loss_mask[i, L:].any()
        if not r.truncated[i]:
            assert r.completion_ids[i, L - 1] == eos and not (r.completion_ids[i, : L - 1] == eos).any()
            assert (r.completion_ids[i, L:] == tok.pad_token_id).all()
            assert r.texts[i] == tok.decode(r.completion_ids[i, : L - 1], skip_special_tokens=True)


def test_generation_ignores_generation_config_top_k():
    model, tok = tiny_model_and_tokenizer(seed=0)
    model.generation_config.top_k = 1  # would make every sample identical if it leaked in
    model.generation_config.repetition_penalty = 5.0
    torch.manual_seed(0)
    r = generate_rollout(model, tok, ["x"], group_size=256, max_new_tokens=1)
    first = r.completion_ids[:, 0]
    # near-uniform tiny model over 105 tokens: 256 draws hit far more than 50 distinct tokens,
    # so neither generation_config.top_k=1 nor transformers' default top_k=50 is in effect
    assert len(set(first.tolist())) > 60
    assert model.generation_config.top_k == 1  # the model's own config is restored


def test_greedy_generation_agrees_with_scoring_under_left_padding():
    """Position ids and masks during generation match those used for scoring: greedy tokens are
    the argmax of our scored distribution at every real completion position."""
    model, tok = tiny_model_and_tokenizer(seed=3)
    r = generate_rollout(model, tok, ["ab", "a longer prompt"], group_size=1, max_new_tokens=5, do_sample=False)
    T = r.completion_ids.shape[1]
    logp, full = naive_logprobs(model, r.input_ids(), r.attention_mask(), T)
    best = full.max(-1).values
    assert torch.allclose(logp[r.loss_mask], best[r.loss_mask], atol=1e-5)


def test_generation_micro_batch_matches_shapes():
    model, tok = tiny_model_and_tokenizer(seed=0)
    torch.manual_seed(1)
    r = generate_rollout(model, tok, CHAT, group_size=3, max_new_tokens=4, micro_batch=4)
    assert r.completion_ids.shape == (6, 4) and len(r.texts) == 6


def test_generate_rollout_errors():
    model, tok = tiny_model_and_tokenizer()
    with pytest.raises(ValueError):
        generate_rollout(model, tok, ["a"], group_size=0, max_new_tokens=4)
    with pytest.raises(ValueError):
        generate_rollout(model, tok, ["a"], group_size=2, max_new_tokens=4, temperature=0.0)
    with pytest.raises(ValueError):
        generate_rollout(model, tok, ["a", [{"role": "user", "content": "b"}]], group_size=2, max_new_tokens=4)


def test_rollout_select():
    model, tok = tiny_model_and_tokenizer()
    torch.manual_seed(0)
    r = generate_rollout(model, tok, CHAT, group_size=2, max_new_tokens=3)
    s = r.select(torch.tensor([False, False, True, True]))
    assert isinstance(s, Batch) and s.size == 2
    assert s.group_ids.tolist() == [1, 1]
    assert s.texts == r.texts[2:]


# ---------------------------------------------------------------- log-probs
def _random_batch(tok, T=6, seed=0):
    ids, mask = encode_prompts(tok, ["hello", "a b c d e f"])
    g = torch.Generator().manual_seed(seed)
    comp = torch.randint(5, len(tok), (2, T), generator=g)
    return torch.cat([ids, comp], 1), torch.cat([mask, torch.ones_like(comp)], 1)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.7])
def test_token_logprobs_temperature_and_entropy(temperature):
    model, tok = tiny_model_and_tokenizer(seed=2)
    with torch.no_grad():  # a less uniform model, so temperature matters visibly
        model.lm_head.weight.mul_(30)
    ids, mask = _random_batch(tok)
    logp, ent = token_logprobs(model, ids, mask, 6, temperature=temperature, with_entropy=True)
    ref, full = naive_logprobs(model, ids, mask, 6, temperature)
    assert logp.shape == (2, 6) and logp.dtype == torch.float32
    torch.testing.assert_close(logp, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, -(full.exp() * full).sum(-1), atol=1e-5, rtol=1e-5)
    if temperature != 1.0:
        plain, _ = naive_logprobs(model, ids, mask, 6, 1.0)
        assert not torch.allclose(logp, plain, atol=1e-3)


def test_token_logprobs_micro_batch_and_gradient():
    model, tok = tiny_model_and_tokenizer(seed=0)
    ids, mask = _random_batch(tok)
    a, _ = token_logprobs(model, ids, mask, 6)
    b, _ = token_logprobs(model, ids, mask, 6, micro_batch=1)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # log-probs near -4.7: 1 float32 ulp is 4.8e-7
    a.sum().backward()
    assert model.lm_head.weight.grad is not None and model.model.embed_tokens.weight.grad.abs().sum() > 0


def test_token_logprobs_fp32_under_bf16_autocast():
    model, tok = tiny_model_and_tokenizer(seed=0)
    ids, mask = _random_batch(tok)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, ent = token_logprobs(model, ids, mask, 6, with_entropy=True)
    assert logp.dtype == torch.float32 and ent.dtype == torch.float32
    ref, _ = naive_logprobs(model, ids, mask, 6)
    torch.testing.assert_close(logp, ref, atol=0.1, rtol=0)  # bf16 matmuls, fp32 softmax


def test_token_logprobs_errors():
    model, tok = tiny_model_and_tokenizer()
    ids, mask = _random_batch(tok)
    with pytest.raises(ValueError):
        token_logprobs(model, ids, mask[:, 1:], 3)
    with pytest.raises(ValueError):
        token_logprobs(model, ids, mask, ids.shape[1])
    with pytest.raises(ValueError):
        token_logprobs(model, ids, mask, 3, temperature=0)


def test_min_new_tokens_suppresses_eos_until_the_length():
    model, tok = tiny_model_and_tokenizer(seed=0, pad_equals_eos=False)
    eos_biased(model, tok.eos_token_id)  # without the option most rows stop early (test above)
    torch.manual_seed(0)
    r = generate_rollout(model, tok, CHAT, group_size=4, max_new_tokens=6, min_new_tokens=6)
    assert r.truncated.all()
    assert (r.lengths == 6).all()
    assert not (r.completion_ids == tok.eos_token_id).any()
    torch.manual_seed(0)
    r = generate_rollout(model, tok, CHAT, group_size=4, max_new_tokens=6, min_new_tokens=3)
    assert (r.lengths >= 3).all()
    assert not (r.completion_ids[:, :3] == tok.eos_token_id).any()


# ---------------------------------------------------------------- prompt sharing (a group's prompt runs once)
def _group_rollout(seed=0, G=3, max_new=6):
    model, tok = tiny_model_and_tokenizer(seed=seed)
    eos_biased(model, tok.eos_token_id, bias=1.5)  # completions of different lengths within a group
    torch.manual_seed(seed)
    r = generate_rollout(model, tok, ["ab", "a much longer prompt", "xyz"], group_size=G, max_new_tokens=max_new)
    return model, tok, r


def test_shared_prompt_logprobs_equal_the_plain_forward_values_and_gradients(monkeypatch):
    import zoo.step.logprobs as R

    used = []
    real = R._shared_prompt_logprobs
    monkeypatch.setattr(R, "_shared_prompt_logprobs", lambda *a, **k: used.append(real(*a, **k)) or used[-1])
    model, _, r = _group_rollout()
    ids, att, T, m = r.input_ids(), r.attention_mask(), r.completion_ids.shape[1], r.loss_mask
    assert len(set(map(tuple, r.prompt_ids.tolist()))) < r.size  # prompts repeat: the shared path is taken
    grads = []
    for share in (True, False):
        model.zero_grad()
        lp, ent = token_logprobs(model, ids, att, T, with_entropy=True, share_prompts=share, micro_batch=4)
        (lp * m).sum().backward()
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        if share:
            shared_lp, shared_ent = lp.detach(), ent
    plain_lp, plain_ent = lp.detach(), ent
    assert sum(u is not None for u in used) == 2  # chunks [0-3], [4-7] repeat a prompt; [8] alone does not
    torch.testing.assert_close(shared_lp[m], plain_lp[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_ent[m], plain_ent[m], atol=1e-5, rtol=1e-5)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-5, rtol=1e-4, msg=k)


def test_shared_prefill_generation_equals_plain_generation():
    model, tok = tiny_model_and_tokenizer(seed=4)
    prompts = ["ab", "a much longer prompt"]
    outs = [
        generate_rollout(model, tok, prompts, group_size=3, max_new_tokens=6, do_sample=False, share_prompts=s)
        for s in (True, False)
    ]
    assert torch.equal(outs[0].completion_ids, outs[1].completion_ids)
    assert torch.equal(outs[0].loss_mask, outs[1].loss_mask)
    torch.manual_seed(5)
    a = generate_rollout(model, tok, prompts, group_size=3, max_new_tokens=6, share_prompts=True)
    torch.manual_seed(5)
    b = generate_rollout(model, tok, prompts, group_size=3, max_new_tokens=6, share_prompts=False)
    assert torch.equal(a.completion_ids, b.completion_ids)  # same sampling stream, same distributions


# ---------------------------------------------------------------- a prefix every prompt shares
SHOTS = "Worked example: 1 + 1 = 2. The answer is 2.\n"  # a long prefix every prompt starts with (character tokens)


def _prefixed_rollout(seed=7, G=2):
    model, tok = tiny_model_and_tokenizer(seed=seed)
    prompts = [SHOTS + q for q in ("3 + 4?", "12 - 30 is what?", "9 - 1?")]  # 3 distinct prompts, 3 lengths
    torch.manual_seed(seed)
    return model, tok, prompts, generate_rollout(model, tok, prompts, group_size=G, max_new_tokens=5)


def test_shared_prefix_len_and_prefix_first_by_hand(monkeypatch):
    import zoo.models.forward as F

    monkeypatch.setattr(F, "SHARED_PREFIX_MIN", 2)
    ids = torch.tensor([[0, 5, 6, 7], [5, 6, 8, 9], [5, 6, 7, 1]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])
    assert F.shared_prefix_len(ids, mask) == 2  # [5, 6]; the shortest row (3 tokens) keeps one of its own
    assert F.shared_prefix_len(ids[[0, 2]], mask[[0, 2]]) == 2  # [5, 6, 7] shared, capped at 3 - 1
    assert F.shared_prefix_len(ids[:1], mask[:1]) == 0  # one row: nothing to share
    assert F.shared_prefix_len(ids, torch.tensor([[1, 1, 0, 1]] * 3)) == 0  # not left padding
    monkeypatch.setattr(F, "SHARED_PREFIX_MIN", 3)
    assert F.shared_prefix_len(ids, mask) == 0  # below the minimum
    order = F.prefix_first(mask, 2)
    assert order.tolist() == [[1, 2, 0, 3], [0, 1, 2, 3], [0, 1, 2, 3]]
    assert ids.gather(1, order).tolist()[0] == [5, 6, 0, 7]
    assert F.position_ids_from_mask(mask.gather(1, order)).tolist()[0] == [0, 1, 1, 2]  # positions follow tokens


def test_shared_prefix_logprobs_equal_the_plain_forward_values_and_gradients():
    from zoo.models.forward import shared_prefix_len

    model, _, _, r = _prefixed_rollout()
    ids, att, T, m = r.input_ids(), r.attention_mask(), r.completion_ids.shape[1], r.loss_mask
    P = ids.shape[1] - T
    assert shared_prefix_len(ids[:, :P], att[:, :P]) >= len(SHOTS) - 1  # the shared path is taken
    out = []
    for share in (True, False):
        model.zero_grad()
        lp, ent = token_logprobs(model, ids, att, T, with_entropy=True, share_prompts=share)
        (lp * m).sum().backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        out.append((lp.detach(), ent, grads))
    (a_lp, a_ent, a_g), (b_lp, b_ent, b_g) = out
    torch.testing.assert_close(a_lp[m], b_lp[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a_ent[m], b_ent[m], atol=1e-5, rtol=1e-5)
    assert a_g.keys() == b_g.keys() and len(a_g) > 0
    for k in a_g:  # the prefix ran once for all rows, and its gradient reaches every weight as before
        torch.testing.assert_close(a_g[k], b_g[k], atol=1e-5, rtol=1e-4, msg=k)
    lp_rows, _ = token_logprobs(model, ids[:1], att[:1], T)  # a prompt alone: no sharing at all
    torch.testing.assert_close(lp_rows[0][m[0]], a_lp[0][m[0]], atol=1e-5, rtol=1e-5)


def test_shared_prefix_generation_equals_plain_generation_greedy_and_sampled():
    model, tok, prompts, _ = _prefixed_rollout()
    greedy = [
        generate_rollout(model, tok, prompts, group_size=1, max_new_tokens=6, do_sample=False, share_prompts=s)
        for s in (True, False)
    ]  # G = 1: distinct prompts, so only the shared prefix is shared
    assert torch.equal(greedy[0].completion_ids, greedy[1].completion_ids)
    assert torch.equal(greedy[0].prompt_ids, greedy[1].prompt_ids)  # the batch keeps the left-padded layout
    torch.testing.assert_close(greedy[0].logp_rollout, greedy[1].logp_rollout, atol=1e-5, rtol=1e-5)
    sampled = []
    for s in (True, False):
        torch.manual_seed(3)
        sampled.append(generate_rollout(model, tok, prompts, group_size=3, max_new_tokens=6, share_prompts=s))
    assert torch.equal(sampled[0].completion_ids, sampled[1].completion_ids)


def test_critic_values_with_a_shared_prompt_equal_the_plain_forward_values_and_gradients(monkeypatch):
    """The critic's values (zoo.step.forwards.critic_values) run each prompt and the prefix every prompt
    shares once through its backbone, as the policy's log-probs do: same values and gradients as one
    forward of every row (a LoRA critic and a full one)."""
    import zoo.step.forwards as F
    from zoo.models import make_critic
    from zoo.step.types import StepSettings

    model, _, _, r = _prefixed_rollout()
    s = StepSettings.__new__(StepSettings)
    object.__setattr__(s, "autocast", "none")
    for lora in (None, {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}):
        critic = make_critic(model, lora, head_std=0.1)
        ids, att, T = r.input_ids(), r.attention_mask(), r.completion_ids.shape[1]
        assert F._shared_values(critic, ids, att, T) is not None  # the shared path is taken
        out = []
        for share in (True, False):
            if not share:
                monkeypatch.setattr(F, "_shared_values", lambda *a: None)
            critic.zero_grad()
            v = F.critic_values(critic, r, s)  # [n, T]
            (v * r.loss_mask).sum().backward()
            out.append((v.detach(), {k: p.grad.clone() for k, p in critic.named_parameters() if p.grad is not None}))
        monkeypatch.undo()
        (a, ga), (b, gb) = out
        assert a.shape == r.completion_ids.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        assert ga.keys() == gb.keys() and len(ga) > 0
        for k in ga:
            torch.testing.assert_close(ga[k], gb[k], atol=1e-5, rtol=1e-4, msg=k)
