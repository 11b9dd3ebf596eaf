"""Policy source `dual_encoder`: a CLIP-style image/text model whose "vocabulary" is the class names (issue 32 §3).

    enc = tiny_dual_encoder(["red circle", "blue square"], seed=0)     # built in code, no file, no Hub
    logits = enc.logits(enc.pixels(images))                           # [B, C] = scale x cos(image, class prompt)
    params = adapt_parameters(enc, "norms")                           # only these train; the rest is frozen

A completion is one class: the policy's distribution over classes for an image x is
softmax(scale * cos(f(x), g(prompt_c))) over the C class prompts, as CLIP's zero-shot classifier
(Radford et al., arXiv 2103.00020 §3.1.2). `scale` is the model's own exp(logit_scale), frozen.
The class prompts are `template.format(name)`; the default "a photo of a {}." is CLIP's (§3.1.4).
The text encoder never adapts (GRPO-TTA's abstract: "visual encoder tuning"), so the class
embeddings are computed once, without gradients, and cached.

Which parameters adapt is declared (`adapt_parameters`): `visual` = the whole vision tower and its
projection (GRPO-TTA abstract: the visual encoder is tuned), `norms` = the vision tower's LayerNorm
weights and biases only (RLCF's `only_norm` option, arXiv 2305.18010 code `--tune_norm`; TPT-style
light tuning). Everything else has requires_grad False.

The model is a transformers `CLIPModel` built from a `CLIPConfig` in code; its text side reads a
character tokenizer (`zoo.models.chatml.char_tokenizer`), its images go through a locally constructed
`CLIPImageProcessorPil` (PIL only, no torchvision).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.models.chatml import char_tokenizer

ADAPT_CHOICES = ("visual", "norms")
DEFAULT_TEMPLATE = "a photo of a {}."  # CLIP arXiv 2103.00020 §3.1.4
_TEXT_CHARS = list(string.ascii_lowercase + string.digits + " .,-'")


@dataclass
class DualEncoder:
    """A CLIP model, its tokenizer and image processor, and the class names it scores."""

    model: Any  # transformers CLIPModel
    tokenizer: Any
    processor: Any  # CLIPImageProcessorPil
    classes: list[str]
    template: str = DEFAULT_TEMPLATE
    _class_emb: Tensor | None = field(default=None, repr=False)

    def pixels(self, images: Sequence[Any]) -> Tensor:
        """PIL images (or anything the processor takes) -> pixel_values [B, 3, H, W]."""
        return self.processor(images=list(images), return_tensors="pt")["pixel_values"]

    def text_embeddings(self, texts: Sequence[str]) -> Tensor:
        """Unit-norm text embeddings [N, D] of `texts`: the final-normed hidden state at each text's
        end token (right padding), through `text_projection`, as CLIP pools its text tower."""
        tok = self.tokenizer
        enc = tok([t + tok.eos_token for t in texts], padding=True, return_tensors="pt")
        hidden = self.model.text_model(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state
        last = enc.attention_mask.sum(dim=1) - 1  # [N] the end token's position
        pooled = hidden[torch.arange(hidden.shape[0]), last]  # [N, H]
        return F.normalize(self.model.text_projection(pooled), dim=-1)

    def class_embeddings(self) -> Tensor:
        """[C, D] unit-norm embeddings of the class prompts, computed once without gradients."""
        if self._class_emb is None:
            with torch.no_grad():
                self._class_emb = self.text_embeddings([self.template.format(c) for c in self.classes])
        return self._class_emb

    def forget_class_embeddings(self) -> None:
        """Drop the cached class embeddings (after the text tower changed, e.g. in pre-training)."""
        self._class_emb = None

    def image_embeddings(self, pixel_values: Tensor) -> Tensor:
        """pixel_values [B, 3, H, W] -> unit-norm image embeddings [B, D] (with gradients)."""
        pooled = self.model.vision_model(pixel_values=pixel_values).pooler_output  # [B, H]
        return F.normalize(self.model.visual_projection(pooled), dim=-1)

    def scale(self) -> Tensor:
        """The model's logit scale exp(logit_scale) (a scalar, no gradient)."""
        return self.model.logit_scale.detach().exp()

    def logits(self, pixel_values: Tensor, class_emb: Tensor | None = None) -> Tensor:
        """[B, C] = scale * cos(image, class prompt); `class_emb` [C, D] defaults to the cached ones."""
        emb = self.class_embeddings() if class_emb is None else class_emb
        return self.scale() * self.image_embeddings(pixel_values) @ emb.T


def tiny_dual_encoder(
    classes: Sequence[str],
    seed: int = 0,
    *,
    image_size: int = 32,
    patch_size: int = 8,
    hidden: int = 32,
    layers: int = 2,
    template: str = DEFAULT_TEMPLATE,
) -> DualEncoder:
    """A randomly initialised tiny CLIP (deterministic given `seed`) for `classes`, built in code."""
    from transformers import CLIPConfig, CLIPModel

    tok = char_tokenizer(_TEXT_CHARS)
    tok.padding_side = "right"  # text_embeddings reads the end token at sum(mask) - 1
    shape = dict(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=2)
    ids = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id)
    cfg = CLIPConfig(
        text_config={**shape, **ids, "vocab_size": len(tok), "max_position_embeddings": 64},
        vision_config={**shape, "image_size": image_size, "patch_size": patch_size},
        projection_dim=hidden,
    )
    torch.manual_seed(seed)
    model = CLIPModel(cfg).eval()
    crop = {"height": image_size, "width": image_size}
    processor = _pil_processor()(size={"shortest_edge": image_size}, crop_size=crop)
    return DualEncoder(model, tok, processor, list(classes), template)


def _pil_processor() -> Any:
    """transformers 5's `CLIPImageProcessorPil`; before 5, `CLIPImageProcessor` was the PIL/numpy one."""
    import transformers

    return getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor


def is_norm(module: nn.Module) -> bool:
    return isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm2d))


def adapt_parameters(enc: DualEncoder, which: str) -> list[nn.Parameter]:
    """Freeze every parameter of `enc.model`, then unfreeze the declared subset and return it:
    `visual` = vision tower + visual projection, `norms` = the vision tower's norm layers.
    Raises ValueError naming the allowed values."""
    if which not in ADAPT_CHOICES:
        raise ValueError(f"key 'adapt': must be one of {', '.join(ADAPT_CHOICES)}, got {which!r}")
    model = enc.model
    for p in model.parameters():
        p.requires_grad_(False)
    if which == "visual":
        chosen = list(model.vision_model.parameters()) + list(model.visual_projection.parameters())
    else:
        chosen = [p for m in model.vision_model.modules() if is_norm(m) for p in m.parameters(recurse=False)]
    for p in chosen:
        p.requires_grad_(True)
    return chosen


def pretrain_contrastive(enc: DualEncoder, images: Sequence[Any], labels: Sequence[str], *, steps: int, lr: float = 3e-3,
                         batch: int = 36, seed: int = 0) -> list[float]:  # fmt: skip
    """Train both towers for `steps` AdamW steps so image i matches its label's class prompt: the
    image-to-text half of CLIP's loss (arXiv 2103.00020 Fig. 3) over all C class prompts (a batch
    holds several images per class, so the text-to-image half would have tied targets). Returns the
    losses. Leaves the model in eval mode, every parameter trainable, and the class cache empty."""
    gen = torch.Generator().manual_seed(seed)
    px = enc.pixels(images)  # [M, 3, H, W]
    target = torch.tensor([enc.classes.index(y) for y in labels])  # [M]
    for p in enc.model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(enc.model.parameters(), lr=lr, weight_decay=0.0)
    prompts = [enc.template.format(c) for c in enc.classes]
    losses = []
    enc.model.train()
    for _ in range(steps):
        idx = torch.randperm(px.shape[0], generator=gen)[:batch]
        logits = enc.model.logit_scale.exp() * enc.image_embeddings(px[idx]) @ enc.text_embeddings(prompts).T
        loss = F.cross_entropy(logits, target[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    enc.model.eval()
    enc.forget_class_embeddings()
    return losses
