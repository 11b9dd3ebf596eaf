"""Tiny, fully offline models + tokenizer for the tests, scripts/gpu_check.py and bench/ (no zoo module imports it).

`tiny_model_and_tokenizer()` (and `tiny_reward_model_and_tokenizer()`, the same Llama as a one-label
sequence classifier) builds, in well under a second and without any file or network access:

- a character-level tokenizer (`zoo.models.chatml.char_tokenizer`, the one the `arms:` model uses too)
  with ChatML-style special tokens and a ChatML `chat_template`, so
  `apply_chat_template(..., add_generation_prompt=True)` works exactly as for SmolLM2 / Qwen;
- a randomly initialised `LlamaForCausalLM` (hidden 64, 2 layers by default) whose vocabulary matches
  the tokenizer.

Token ids: 0 `<|pad|>`, 1 `<|bos|>`, 2 `<|im_end|>` (= eos), 3 `<|im_start|>`, 4 `<unk>`, then the
printable ASCII characters. With `pad_equals_eos=True` there is no separate pad token: pad = eos
(`<|im_end|>`), as in SmolLM2.
"""

from __future__ import annotations

import string

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    PreTrainedTokenizerFast,
)

from zoo.models.chatml import char_tokenizer

CHARACTERS = list(string.printable)  # 100 characters incl. space, \t, \n


def tiny_tokenizer(*, pad_equals_eos: bool = False) -> PreTrainedTokenizerFast:
    """Character-level ChatML tokenizer (105 tokens: `zoo.models.chatml.char_tokenizer` over the printable
    ASCII characters), left padding, no BOS added automatically.

    pad_equals_eos: use `<|im_end|>` as the pad token (the `<|pad|>` id then stays unused).
    """
    return char_tokenizer(CHARACTERS, pad_equals_eos=pad_equals_eos)


def tiny_model_and_tokenizer(
    seed: int = 0,
    vocab: int | None = None,
    hidden: int = 64,
    layers: int = 2,
    *,
    pad_equals_eos: bool = False,
    heads: int = 4,
    kv_heads: int = 2,
    max_positions: int = 512,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A random tiny Llama and its character tokenizer, deterministic given `seed`.

    vocab: model vocabulary size; default = len(tokenizer) (105). A larger value adds unused ids
        (they can still be sampled and decode to nothing). Smaller than the tokenizer raises ValueError.
    hidden, layers, heads, kv_heads: Llama shape (hidden must be divisible by heads).
    pad_equals_eos: pad token = eos (`<|im_end|>`), as in SmolLM2; otherwise a separate `<|pad|>`.

    The global torch RNG state is left untouched (initialisation runs under `torch.random.fork_rng`).
    The model is in train mode, fp32, on CPU, with `generation_config` eos/pad/bos ids set.
    """
    tok = tiny_tokenizer(pad_equals_eos=pad_equals_eos)
    n_vocab = len(tok) if vocab is None else int(vocab)
    if n_vocab < len(tok):
        raise ValueError(f"vocab={n_vocab} is smaller than the tokenizer ({len(tok)} tokens)")
    config = LlamaConfig(
        vocab_size=n_vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    model.train()
    return model, tok


def tiny_reward_model_and_tokenizer(
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    *,
    pad_equals_eos: bool = True,
) -> tuple[LlamaForSequenceClassification, PreTrainedTokenizerFast]:
    """A random tiny Llama reward model (`LlamaForSequenceClassification`, num_labels 1, the scalar head
    `score`) and its character tokenizer, deterministic given `seed`; pad = eos by default (as in SmolLM2),
    with `config.pad_token_id` set explicitly. Eval mode, fp32, CPU; the global RNG is left untouched."""
    tok = tiny_tokenizer(pad_equals_eos=pad_equals_eos)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        num_labels=1,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(config)
        torch.nn.init.normal_(model.score.weight, std=1.0)  # scores of order 1, not ~0.02
    model.eval()
    return model, tok


def tiny_vllm_model_and_tokenizer(seed: int = 0, **kw) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """`tiny_model_and_tokenizer` in a shape vLLM's CPU attention accepts (head size 64 >= 32): hidden 128,
    2 layers, 2 heads, 1 KV head. Keywords override (`tiny_model_and_tokenizer`'s)."""
    shape = dict(hidden=128, layers=2, heads=2, kv_heads=1)
    return tiny_model_and_tokenizer(seed, **{**shape, **kw})


def set_counting(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, shift: int = 1, margin: float = 30.0) -> None:
    """Make a `counting_model_and_tokenizer` model write, after token i, token i + `shift` (clamped to the
    vocabulary) and EOS after 'e': lm_head column i gets +margin at that token and -margin elsewhere,
    so the next token is certain (p = 1 - V e^-2margin) whatever the context. An in-place weight update."""
    V, H = model.lm_head.weight.shape
    e_id, eos = tok.convert_tokens_to_ids("e"), tok.eos_token_id
    scale = margin / H**0.5  # the final RMSNorm maps a one-hot embedding to sqrt(H) * one-hot
    w = torch.full((V, H), -scale)
    for i in range(V):
        w[eos if i == e_id else min(i + shift, V - 1), i] = scale
    with torch.no_grad():
        model.lm_head.weight.copy_(w)


def counting_model_and_tokenizer(shift: int = 1) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A plain Llama (hidden 128, 1 layer, 2 heads, vLLM-compatible) whose weights count: it writes the
    token `shift` ids after its last input token and EOS after 'e', so with the character tokenizer
    '...a' continues 'bcde' EOS and '...0' continues '123456...'. Embeddings are one-hot (token i ->
    unit vector i, vocab 105 <= hidden), attention and MLP outputs are zero (o_proj, down_proj = 0), so
    the residual stream is the embedding and the logits are lm_head(RMSNorm(one-hot)) (`set_counting`).
    The same weights count under transformers and under vLLM; eval mode, fp32, CPU."""
    model, tok = tiny_model_and_tokenizer(0, hidden=128, layers=1, heads=2, kv_heads=1)
    V, H = model.lm_head.weight.shape
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(V, H))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    set_counting(model, tok, shift)
    model.eval()
    return model, tok


class ScriptedGenerator:
    """A deterministic test generator (`zoo.core.kinds.Generator`'s `continue_` only): call k of `continue_`
    gives every row the assistant text `script[k]` (the last one repeated), tokenized with `tokenizer`;
    a text that does not end with one of the call's stop strings gets the EOS id appended (a sampled
    EOS). `max_new_tokens` cuts a text (truncated). With `model`, `logp_rollout` is the model's
    log-softmax of each emitted token after its own prefix (one forward per row); else 0.
    `calls` records each call's prefix ids."""

    def __init__(self, tokenizer, script, model=None) -> None:
        self.tokenizer, self.script, self.model = tokenizer, list(script), model
        self.calls: list[list[list[int]]] = []

    def continue_(self, prefix_ids, sampling, stop=(), /):
        from zoo.core.generator_types import Continuation

        text = self.script[min(len(self.calls), len(self.script) - 1)]
        self.calls.append([list(p) for p in prefix_ids])
        new = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not any(text.endswith(s) for s in stop):
            new.append(int(self.tokenizer.eos_token_id))
        truncated = len(new) > sampling.max_new_tokens
        new = new[: sampling.max_new_tokens]
        n, T = len(prefix_ids), len(new)
        ids = torch.tensor([new] * n, dtype=torch.long)
        logp = torch.zeros(n, T)
        if self.model is not None:
            with torch.no_grad():
                for i, p in enumerate(prefix_ids):
                    full = torch.tensor([list(p) + new])
                    lp = torch.log_softmax(self.model(full).logits[0, len(p) - 1 : -1].float(), -1)
                    logp[i] = lp.gather(1, full[0, len(p) :, None])[:, 0]
        shown = new[:-1] if new and new[-1] == self.tokenizer.eos_token_id else new
        return Continuation(
            ids=ids,
            mask=torch.ones(n, T, dtype=torch.bool),
            logp_rollout=logp,
            truncated=torch.full((n,), truncated),
            lengths=torch.full((n,), T),
            stopped_by=[None] * n,
            texts=[self.tokenizer.decode(shown, skip_special_tokens=True)] * n,
        )

    def sync(self, policy, /) -> None:
        pass
