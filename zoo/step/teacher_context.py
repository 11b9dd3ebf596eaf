"""The teacher's prompt (docs/reference/distillation.md "Distillation"): the student's prompt with `teacher.context`,
which the student never sees.

- `context` a string: text put before the student's real prompt tokens (its tokens, then the prompt's);
- `context` a list of messages ({role, content}): chat turns put before the row's prompt messages (after
  a leading system message, if the row has one), the whole rendered through the chat template, as the
  task renders the student's prompt (zoo.backends.generate.hf.encode_prompts): e.g. worked examples as
  user / assistant turns, the 2-shot format of a 0-shot student.

Every text is formatted with the task row's fields (`{answer}`, `{question}`; a literal brace is `{{`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from zoo.core.batch import Batch


def _format(text: str, row: Mapping[str, Any]) -> str:
    try:
        return text.format_map(dict(row))
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(
            f"teacher.context: cannot format it with the task row's fields {sorted(row)} ({e!r}); "
            "write a literal { or } as {{ or }}"
        ) from None


def _with_turns(turns: Sequence[Mapping[str, str]], row: Mapping[str, Any]) -> list[dict[str, str]]:
    """The row's prompt messages with the context's turns before them (after a leading system message)."""
    msgs = [dict(m) for m in row.get("prompt") or []]
    if not msgs or isinstance(row.get("prompt"), str):
        raise ValueError("teacher.context as messages needs chat prompts (the row's 'prompt' is no message list)")
    ctx = [{"role": str(m["role"]), "content": _format(str(m["content"]), row)} for m in turns]
    head = 1 if msgs[0].get("role") == "system" else 0
    return msgs[:head] + ctx + msgs[head:]


def _ids(batch: Batch, i: int, tokenizer: Any, context: str | Sequence[Mapping[str, str]], row: Mapping) -> list[int]:
    if isinstance(context, str):
        ctx = tokenizer(_format(context, row), add_special_tokens=False)["input_ids"]
        return list(ctx) + batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist()
    text = tokenizer.apply_chat_template(_with_turns(context, row), add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def teacher_prompts(batch: Batch, tokenizer: Any, context: Any) -> tuple[Tensor, Tensor]:
    """(prompt_ids [N, P'], prompt_mask [N, P']) of the teacher, left-padded like the student's; the
    student's own prompt when `context` is empty (see the module doc)."""
    if not context:
        return batch.prompt_ids, batch.prompt_mask
    rows = batch.rows or [{}] * batch.size
    seqs = [_ids(batch, i, tokenizer, context, rows[i]) for i in range(batch.size)]
    width, pad = max(map(len, seqs)), tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((batch.size, width), pad, dtype=batch.prompt_ids.dtype)
    mask = torch.zeros((batch.size, width), dtype=batch.prompt_mask.dtype)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=ids.dtype)
        mask[i, width - len(s) :] = 1
    dev = batch.prompt_ids.device
    return ids.to(dev), mask.to(dev)
