"""The ChatML special tokens, chat template and character tokenizer of the small models zoo builds itself
(the `arms:` bandit model, `zoo.models.arms`, and the tests' tiny models, `zoo.models.tiny`): ids 0
`<|pad|>`, 1 `<|bos|>`, 2 `<|im_end|>` (= eos), 3 `<|im_start|>`, 4 `<unk>`, then one token per character."""

from __future__ import annotations

PAD, BOS, EOS, IM_START, UNK = "<|pad|>", "<|bos|>", "<|im_end|>", "<|im_start|>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, IM_START, UNK]

#: ChatML (as SmolLM2-Instruct and Qwen use), without a default system prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def char_tokenizer(characters: list[str], *, pad_equals_eos: bool = False, extra_special: tuple[str, ...] = ()):
    """A `PreTrainedTokenizerFast` with the special tokens above, then one token per character of
    `characters` (a `tokenizers` WordLevel model; every other character reads as `<unk>`), the ChatML
    `chat_template`, left padding and no BOS added automatically. Special tokens are matched before
    the one-character pre-tokenisation.

    pad_equals_eos: use `<|im_end|>` as the pad token (the `<|pad|>` id then stays unused), as SmolLM2.
    extra_special: more special tokens (an image placeholder, `zoo.models.tiny_vlm`), given the ids after
        the characters, so the ids above are unchanged.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(characters) + list(extra_special))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=EOS if pad_equals_eos else PAD,
        additional_special_tokens=[IM_START] + ([PAD] if pad_equals_eos else []) + list(extra_special),
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
