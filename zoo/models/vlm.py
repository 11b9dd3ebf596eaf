"""Vision-language policies (issue 32 §1): which checkpoints are image-text models, and their processors.

A checkpoint is image-text when its config has a `vision_config` (Qwen2-VL, Qwen2.5-VL, LLaVA, Gemma 3,
SmolVLM ...); `load_policy` then loads it with `AutoModelForImageTextToText` and `load_processor` its
`AutoProcessor`. Where `AutoProcessor` cannot be built because a video processor needs torchvision
(Qwen2-VL's and Qwen2.5-VL's on a CPU install; zoo does not install torchvision), the processor class
named by the checkpoint is built from its tokenizer and PIL image processor, without a video processor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PROCESSOR_FILE = "processor_config.json"


def is_image_text(config: Any) -> bool:
    """Whether a model config is a vision-language model's (it has a `vision_config`)."""
    return getattr(config, "vision_config", None) is not None


def image_only(cls: type) -> type:
    """`cls` (a processor class) that accepts no video processor: transformers checks each processor
    argument's class, and the video processors' base class needs torchvision; images alone never reach
    the video processor."""

    class ImageOnly(cls):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    ImageOnly.__name__ = ImageOnly.__qualname__ = cls.__name__
    return ImageOnly


def save_processor(processor: Any, out: str | os.PathLike, init: dict[str, Any]) -> None:
    """Write `processor`'s tokenizer, image processor and `processor_config.json` ({"processor_class",
    **init}: the keyword arguments `load_processor` builds it with) into `out`. A processor without a
    video processor cannot `save_pretrained` itself in transformers 5."""
    processor.tokenizer.save_pretrained(out)
    processor.image_processor.save_pretrained(out)
    cfg = {"processor_class": type(processor).__name__, **init}
    (Path(out) / PROCESSOR_FILE).write_text(json.dumps(cfg, indent=1))


def load_processor(path: str | os.PathLike) -> Any:
    """The vision-language processor of the checkpoint at `path` (a directory or a Hub id):
    `AutoProcessor`, or, when that needs torchvision for a video processor, the class its
    `processor_config.json` names built from `AutoTokenizer` and `AutoImageProcessor` (the PIL one)
    with that file's other keys. Its tokenizer pads on the left and has a pad token."""
    import transformers
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        proc = AutoProcessor.from_pretrained(path)
    except ImportError:  # a video processor that needs torchvision
        cfg = _processor_config(path)
        cls = image_only(getattr(transformers, cfg.pop("processor_class")))
        tok = AutoTokenizer.from_pretrained(path)
        cfg.pop("chat_template", None)
        proc = cls(
            image_processor=AutoImageProcessor.from_pretrained(path),
            tokenizer=tok,
            chat_template=tok.chat_template,
            **cfg,
        )
    tok = proc.tokenizer  # as zoo.models.policy.prepare_tokenizer: left padding and a pad token
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return proc


def _processor_config(path: str | os.PathLike) -> dict[str, Any]:
    """`processor_config.json` of a local directory or a Hub id (from the HF cache)."""
    local = Path(path) / PROCESSOR_FILE
    if local.is_file():
        return json.loads(local.read_text())
    from transformers.utils import cached_file

    return json.loads(Path(cached_file(str(path), PROCESSOR_FILE)).read_text())
