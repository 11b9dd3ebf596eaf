"""Token ids of a multi-turn conversation, built incrementally and never re-templated.

A trajectory's ids are the prompt's (the chat template of the env's first messages with the
generation prompt), then per turn the sampled ids as they were drawn, then the ids of what the
template and the environment add: the text template(conversation + new messages, generation
prompt) minus template(conversation), tokenized alone. So the trained ids are exactly the sampled
ids, and a template that adds a default system prompt when a message is templated alone (SmolLM2)
adds nothing here (the whole conversation is always rendered).
"""

from __future__ import annotations

from typing import Sequence


def render(tokenizer, messages: Sequence[dict], generation_prompt: bool) -> str:
    """The chat template's text of `messages` (no tokenization)."""
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=generation_prompt, tokenize=False)


def encode(tokenizer, text: str) -> list[int]:
    """Ids of template text (the template wrote the special tokens; none are added)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def special_strings(tokenizer) -> list[str]:
    """The text forms of the tokenizer's special and added control tokens (`<|im_end|>`, ...)."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    out = set(tokenizer.all_special_tokens) | {t.content for t in added.values() if getattr(t, "special", False)}
    return sorted((s for s in out if s), key=len, reverse=True)


def encode_env(tokenizer, text: str, contents: Sequence[str]) -> list[int]:
    """Ids of template text in which `contents` (the environment's messages, in order) can never
    become control tokens: a content that spells a special token (`<|im_end|>`) is tokenized with
    `split_special_tokens=True`, so it stays plain text; the template's own markup around it keeps
    its special ids. Without such a content: exactly `encode(text)`. Raises ValueError when the
    template does not write such a content verbatim (it cannot then be kept apart)."""
    specials = special_strings(tokenizer)
    if not any(sp in c for c in contents for sp in specials):
        return encode(tokenizer, text)
    ids: list[int] = []
    pos = 0
    for c in contents:
        if not any(sp in c for sp in specials):
            continue
        at = text.find(c, pos)
        if at < 0:
            raise ValueError(
                "the chat template does not write an environment message verbatim; it cannot be kept apart"
            )
        ids += encode(tokenizer, text[pos:at])
        ids += list(tokenizer(c, add_special_tokens=False, split_special_tokens=True)["input_ids"])
        pos = at + len(c)
    return ids + encode(tokenizer, text[pos:])


def prompt_ids(tokenizer, messages: Sequence[dict]) -> tuple[list[int], str]:
    """(ids, text) of the conversation a trajectory starts from, with the generation prompt; the ids
    are what `zoo.backends.generate.hf.encode_prompts` gives for the same messages, except that a
    message content spelling a control token stays plain text (`encode_env`)."""
    text = render(tokenizer, messages, True)
    return encode_env(tokenizer, text, [str(m.get("content", "")) for m in messages]), text


def appended_ids(
    tokenizer,
    rendered: str,
    assistant_text: str,
    sampled_ids: Sequence[int],
    messages: Sequence[dict],
    env_contents: Sequence[str] = (),
) -> tuple[list[int], str]:
    """The ids after an assistant turn that close it and carry the environment's new messages up to
    the next generation prompt -> (ids, the new rendered text).

    rendered: the template text of the conversation so far, ending at the generation prompt.
    assistant_text: the turn as decoded (what `messages` holds as its assistant message).
    sampled_ids: the turn's sampled ids (a final EOS the template also writes is not added twice).
    messages: the whole conversation, incl. the assistant turn and the new messages.
    env_contents: the new messages' contents, tokenized so they cannot give control ids (`encode_env`).
    Raises ValueError when the template does not extend the conversation's text (a template that
    rewrites earlier turns, e.g. one that drops past reasoning, cannot be extended this way).
    """
    full = render(tokenizer, messages, True)
    head = rendered + assistant_text
    if not full.startswith(head):
        raise ValueError(
            "the chat template does not extend the conversation's text when a message is appended "
            "(it rewrites earlier turns); multi-turn rollouts need a template that only appends"
        )
    delta = full[len(head) :]
    last = int(sampled_ids[-1]) if len(sampled_ids) else None
    if last is not None and last in set(tokenizer.all_special_ids):  # a sampled EOS already closed the turn
        closing = tokenizer.convert_ids_to_tokens(last)
        if delta.startswith(closing):
            delta = delta[len(closing) :]
    return encode_env(tokenizer, delta, env_contents), full
