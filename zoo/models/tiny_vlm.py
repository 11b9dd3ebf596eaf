"""Tiny, fully offline vision-language models and their processors for the tests and the shipped image
study (issue 32 §1), built in code like `zoo.models.tiny` (no file or network access):

- `tiny_qwen2vl_and_processor()`: a random `Qwen2VLForConditionalGeneration` (3-D M-RoPE; its forward
  needs `mm_token_type_ids` beside `pixel_values` and `image_grid_thw`) with a `Qwen2VLProcessor`
  (the PIL image processor `Qwen2VLImageProcessorPil`: no torchvision);
- `tiny_llava_and_processor()`: a random `LlavaForConditionalGeneration` (a CLIP vision tower and a
  Llama) with a `LlavaProcessor` (`LlavaImageProcessorPil`).

Both processors wrap the character tokenizer of `zoo.models.tiny` (same ids 0..104) plus the image
placeholder tokens, with a ChatML template that renders `{"type": "image"}` parts of a message's content
as the model's placeholder (the processor then repeats it once per image token). Images are resized to
32 x 32 pixels: 16 image tokens per image in both models.
"""

from __future__ import annotations

import os
import shutil
import string
import tempfile
from pathlib import Path

import torch
from transformers import GenerationConfig

from zoo.models.chatml import char_tokenizer
from zoo.models.vlm import image_only, save_processor

CHARACTERS = list(string.printable)  # the character set of zoo.models.tiny (ids 5..104)

QWEN_IMAGE = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")
LLAVA_IMAGE = "<image>"
IMAGE_SIDE = 32  # pixels: images are resized to IMAGE_SIDE x IMAGE_SIDE


def vlm_chat_template(image: str) -> str:
    """ChatML (`zoo.models.chatml.CHAT_TEMPLATE`) where a message's content is a string or a list of
    parts `{"type": "text", "text": ...}` / `{"type": "image"}`; an image part becomes `image`."""
    return (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
        "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '" + image + "' }}"
        "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>' + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )


def _finish(model, tok):
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    model.config.pad_token_id = tok.pad_token_id
    model.train()
    return model


def _text_config(tok, hidden: int, layers: int) -> dict:
    return dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def tiny_qwen2vl_and_processor(seed: int = 0, hidden: int = 64, layers: int = 2):
    """(a random tiny `Qwen2VLForConditionalGeneration`, its `Qwen2VLProcessor`), deterministic given
    `seed`; train mode, fp32, CPU; the global RNG is left untouched. Vision: patch 4, temporal patch 2,
    merge 2, one block of width 32; text: a Qwen2 of `hidden` x `layers` with M-RoPE sections [2, 3, 3]
    (head dim 16)."""
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessorPil,
        Qwen2VLProcessor,
    )

    tok = char_tokenizer(CHARACTERS, extra_special=QWEN_IMAGE)
    ids = tok.convert_tokens_to_ids(list(QWEN_IMAGE))
    text = _text_config(tok, hidden, layers)
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    vision = dict(depth=1, embed_dim=32, hidden_size=hidden, num_heads=2, patch_size=4, temporal_patch_size=2)
    config = Qwen2VLConfig(text_config=text, vision_config=vision, vision_start_token_id=ids[0], image_token_id=ids[1])
    config.vision_end_token_id = ids[2]
    config.video_token_id = tok.unk_token_id  # no videos: a token the prompts never hold as a placeholder
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config)
    side = IMAGE_SIDE * IMAGE_SIDE
    images = Qwen2VLImageProcessorPil(
        patch_size=4, temporal_patch_size=2, merge_size=2, size={"shortest_edge": side, "longest_edge": side}
    )
    tok.chat_template = vlm_chat_template("".join(QWEN_IMAGE))
    proc = image_only(Qwen2VLProcessor)(image_processor=images, tokenizer=tok, chat_template=tok.chat_template)
    return _finish(model, tok), proc


def tiny_llava_and_processor(seed: int = 0, hidden: int = 64, layers: int = 2):
    """(a random tiny `LlavaForConditionalGeneration`, its `LlavaProcessor`), deterministic given
    `seed`; train mode, fp32, CPU; the global RNG is left untouched. Vision: a 2-layer CLIP of width 32
    on 32 x 32 images, patch 8 (16 patches; the "default" feature strategy drops CLS); text: a Llama of
    `hidden` x `layers`."""
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaImageProcessorPil,
        LlavaProcessor,
    )

    tok = char_tokenizer(CHARACTERS, extra_special=(LLAVA_IMAGE,))
    vision = CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        image_size=IMAGE_SIDE, patch_size=8,
    )  # fmt: skip
    config = LlavaConfig(
        vision_config=vision,
        text_config=LlamaConfig(**_text_config(tok, hidden, layers)),
        image_token_index=tok.convert_tokens_to_ids(LLAVA_IMAGE),
        image_seq_length=(IMAGE_SIDE // 8) ** 2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlavaForConditionalGeneration(config)
    images = LlavaImageProcessorPil(
        size={"shortest_edge": IMAGE_SIDE}, crop_size={"height": IMAGE_SIDE, "width": IMAGE_SIDE}
    )
    tok.chat_template = vlm_chat_template(LLAVA_IMAGE)
    proc = LlavaProcessor(
        image_processor=images,
        tokenizer=tok,
        patch_size=8,
        vision_feature_select_strategy="default",
        chat_template=tok.chat_template,
        image_token=LLAVA_IMAGE,
        num_additional_image_tokens=1,
    )
    return _finish(model, tok), proc


TINY_VLM_PREFIX = "tiny-vlm:"
_BUILDERS = {"qwen2vl": tiny_qwen2vl_and_processor, "llava": tiny_llava_and_processor}
TINY_VLM_KINDS = tuple(_BUILDERS)
_VERSION = 1


def tiny_vlm_dir(name: str, root: Path) -> Path:
    """The local checkpoint of `name` ("tiny-vlm:qwen2vl" or "tiny-vlm:llava", seed 0) under
    `root/models/`, built on first use (written to a temporary sibling and renamed into place).
    Raises ValueError for another kind."""
    kind = name[len(TINY_VLM_PREFIX) :]
    if kind not in _BUILDERS:
        raise ValueError(
            f"model {name!r}: unknown tiny VLM {kind!r}; known: {', '.join(TINY_VLM_PREFIX + k for k in _BUILDERS)}"
        )
    out = root / "models" / f"tiny-vlm-{kind}-v{_VERSION}"
    if (out / "config.json").is_file() and (out / "processor_config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        model, proc = _BUILDERS[kind]()
        model.save_pretrained(tmp, safe_serialization=True)
        save_processor(proc, tmp, _processor_init(proc))
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, out)
        except OSError:  # another process renamed its copy first: theirs is as good
            if not (out / "processor_config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _processor_init(proc) -> dict:
    """The processor's own keyword arguments `load_processor` rebuilds it with (LLaVA's image-token count)."""
    keys = ("patch_size", "vision_feature_select_strategy", "image_token", "num_additional_image_tokens")
    return {k: getattr(proc, k) for k in keys if type(proc).__name__ == "LlavaProcessor"}
