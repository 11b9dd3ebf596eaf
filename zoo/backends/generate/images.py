"""Prompts with images (issue 32 §1, docs/guides/images.md): a task row's `images` (PIL or encoded bytes)
beside its chat `prompt` go through the policy's vision-language processor, one prompt at a time, into
left-padded ids and one `zoo.core.media.RowMedia` per prompt (what the processor returned besides the
ids), which `generate_rollout` repeats for the G completions of a group."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor

from zoo.core.media import RowMedia, split_processor_output


def open_image(image: Any):
    """A PIL image, RGB, from a PIL image or its encoded bytes (PNG, JPEG ...; `{"bytes": ...}` as
    `datasets` stores an Image column). Raises ValueError for anything else."""
    import io

    from PIL import Image

    if isinstance(image, dict) and isinstance(image.get("bytes"), (bytes, bytearray)):
        image = image["bytes"]
    if isinstance(image, (bytes, bytearray)):
        image = Image.open(io.BytesIO(image))
    if not isinstance(image, Image.Image):
        raise ValueError(f"an image must be a PIL image or encoded bytes, got {type(image).__name__}")
    return image.convert("RGB")


def with_image_parts(messages: Sequence[dict], n_images: int) -> list[dict]:
    """Chat messages whose first user message holds `n_images` `{"type": "image"}` parts before its text,
    unless some message already has image parts (then they are left as they are): TRL's convention for
    a conversational `prompt` beside an `images` column (trl/data_utils.py, `prepare_multimodal_messages`)."""
    msgs = [dict(m) for m in messages]
    has_parts = any(
        isinstance(m["content"], list) and any(p.get("type") == "image" for p in m["content"]) for m in msgs
    )
    if has_parts or n_images == 0:
        return msgs
    for m in msgs:
        if m["role"] == "user":
            text = m["content"] if isinstance(m["content"], str) else None
            parts = [{"type": "text", "text": text}] if text is not None else list(m["content"])
            m["content"] = [{"type": "image"}] * n_images + parts
            break
    return msgs


def placeholder_suppressor(processor):
    """A logits processor that never samples the processor's image / video placeholder tokens
    (`image_token_id`, `video_token_id`): the model's forward matches each placeholder to an image's
    features and fails on a sampled one. Before the recorder, so `logp_rollout` is of the distribution
    without them (our choice; the training forward's log-probs keep their mass, as with top-k)."""
    from transformers import SuppressTokensLogitsProcessor

    ids = [getattr(processor, a, None) for a in ("image_token_id", "video_token_id")]
    return SuppressTokensLogitsProcessor([int(i) for i in ids if i is not None])


def encode_image_prompts(
    processor, prompts: Sequence[list[dict]], images: Sequence[Sequence[Any]], device=None
) -> tuple[Tensor, Tensor, list[RowMedia]]:
    """Chat prompts with their images through a vision-language `processor` (its chat template, then
    text + images, one prompt at a time so each row keeps its own outputs) -> (ids [B, P] long, left
    padded, mask [B, P] long, B `RowMedia`: what the processor returned besides the ids).
    images[b]: prompt b's images (PIL or encoded bytes, `open_image`), possibly none.
    Raises ValueError when len(images) != len(prompts) or a prompt is not a chat message list."""
    if len(images) != len(prompts):
        raise ValueError(f"{len(images)} image lists for {len(prompts)} prompts")
    rows, media = [], []
    for msgs, imgs in zip(prompts, images):
        if isinstance(msgs, str):
            raise ValueError("a prompt with images must be a chat message list, not a plain string")
        pil = [open_image(x) for x in imgs]
        text = processor.apply_chat_template(
            with_image_parts(msgs, len(pil)), add_generation_prompt=True, tokenize=False
        )
        enc = processor(text=[text], images=pil or None, return_tensors="pt")
        rows.append(enc["input_ids"][0])
        media.append(split_processor_output(enc, rows[-1].shape[0]))
    P = max(r.shape[0] for r in rows)
    pad = int(processor.tokenizer.pad_token_id)
    ids = torch.stack([torch.nn.functional.pad(r, (P - r.shape[0], 0), value=pad) for r in rows])  # [B, P]
    mask = torch.stack([(torch.arange(P) >= P - r.shape[0]).long() for r in rows])  # [B, P]
    if device is not None:
        ids, mask = ids.to(device), mask.to(device)
    return ids, mask, media
