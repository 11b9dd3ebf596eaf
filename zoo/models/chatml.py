"""The ChatML special tokens and chat template of the small models zoo builds itself (the `arms:` bandit
model, `zoo.models.arms`, and the tests' tiny models, `zoo.testing`): ids 0 `<|pad|>`, 1 `<|bos|>`,
2 `<|im_end|>` (= eos), 3 `<|im_start|>`, 4 `<unk>`."""

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
