"""Images in prompts (issue 32 §1): what a vision-language processor returns for one prompt besides
`input_ids` / `attention_mask`, kept per row so it travels with the rows of a `Batch`.

A rollout of an image task holds one `RowMedia` per completion (`Batch.media`, a list of N; the G
completions of a group share one object, nothing is copied). Selecting, permuting, minibatching and
concatenating rows selects their images with them (it is a list field of the Batch, as `rows` is), so
images of varying size, patch count and number per row never need a slice index of their own. Each
forward (generation, old / reference / training log-probs, the critic) collates the rows it runs into
the processor's own layout with `media_inputs`:

- `items`, per image (or per patch): concatenated over the rows along dim 0, in row order, as the
  processor concatenates them for a batch (Qwen2-VL `pixel_values` [patches, D] and `image_grid_thw`
  [images, 3]; LLaVA `pixel_values` [images, C, H, W]; `image_sizes` [images, 2] ...);
- `tokens`, one value per prompt token (`mm_token_type_ids` [P_i]): placed on the row's real prompt
  tokens (the last P_i columns of the left-padded prompt) and 0 elsewhere (padding and the completion,
  which is text; 0 is the processors' "text" type).

Text-only batches carry `media = None` and every forward is called exactly as before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class RowMedia:
    """One prompt's processor outputs besides input_ids / attention_mask.

    items:  name -> tensor whose dim 0 counts this prompt's images or patches (concatenated over rows)
    tokens: name -> [P_i] tensor aligned with the prompt's P_i real tokens
    """

    items: dict[str, Tensor] = field(default_factory=dict)
    tokens: dict[str, Tensor] = field(default_factory=dict)

    @property
    def length(self) -> int | None:
        """P_i, the prompt tokens `tokens` covers (None without token fields)."""
        return next((int(v.shape[0]) for v in self.tokens.values()), None)


def split_processor_output(enc: dict, n_tokens: int) -> RowMedia:
    """One prompt's processor output (batch of 1) -> RowMedia: fields shaped [1, n_tokens] like its
    input_ids are per token; every other tensor is per image / patch. input_ids and attention_mask are
    dropped (the Batch holds them)."""
    items, tokens = {}, {}
    for k, v in enc.items():
        if k in ("input_ids", "attention_mask") or not isinstance(v, Tensor):
            continue
        if v.dim() == 2 and v.shape[0] == 1 and v.shape[1] == n_tokens:
            tokens[k] = v[0]
        else:
            items[k] = v
    return RowMedia(items=items, tokens=tokens)


def media_inputs(media: Sequence[RowMedia], prompt_mask: Tensor, width: int, device: torch.device | str) -> dict:
    """The forward's extra inputs for rows [n] whose left-padded prompts are `prompt_mask` [n, P] and
    whose model input is `width` >= P columns wide (prompt then completion):
    items concatenated over the rows (a field no row has images for is left out), tokens [n, width]
    with each row's values on its real prompt tokens and 0 elsewhere.
    Raises ValueError when len(media) != n, or a row's token fields do not cover its real prompt tokens."""
    n, P = prompt_mask.shape
    if len(media) != n:
        raise ValueError(f"{len(media)} rows of media for {n} rows of prompts")
    out: dict[str, Tensor] = {}
    for k in dict.fromkeys(k for m in media for k in m.items):
        parts = [m.items[k] for m in media if k in m.items]
        out[k] = torch.cat(parts).to(device)
    for k in dict.fromkeys(k for m in media for k in m.tokens):
        col = torch.zeros(n, width, dtype=next(m.tokens[k] for m in media if k in m.tokens).dtype)
        for i, m in enumerate(media):
            real = int(prompt_mask[i].sum())
            if k not in m.tokens:
                continue
            if m.tokens[k].shape[0] != real:
                raise ValueError(f"row {i}: {k} covers {m.tokens[k].shape[0]} tokens, the prompt has {real}")
            col[i, P - real : P] = m.tokens[k]
        out[k] = col.to(device)
    return out


def image_digest(image: Any) -> str:
    """sha1 (12 hex digits) of one image as a task row holds it: a PIL image's mode, size and pixels, or
    encoded bytes (also `{"bytes": ...}`) as they are; anything else by its repr. Rows whose prompt text
    and answer agree but whose pictures differ are different problems (`zoo.run.eval_record.prompt_id`)."""
    if isinstance(image, dict) and isinstance(image.get("bytes"), (bytes, bytearray)):
        image = image["bytes"]
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    elif hasattr(image, "tobytes") and hasattr(image, "size") and hasattr(image, "mode"):
        data = f"{image.mode}:{image.size}:".encode() + image.tobytes()
    else:
        data = repr(image).encode()
    return hashlib.sha1(data).hexdigest()[:12]


__all__ = ["RowMedia", "image_digest", "media_inputs", "split_processor_output"]
