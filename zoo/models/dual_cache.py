"""The pre-trained `dual_encoder`, built once and cached (issue 32 §3), like the embedded model's conversion.

    enc = pretrained_dual_encoder(PolicySpec(seed=0))     # first call: pre-trains (~10 s), writes the cache
    enc = pretrained_dual_encoder(PolicySpec(seed=0))     # later calls: loads the same weights, no training

The cache folder is `<cache_root()>/models/dual_encoder-<key>` (`zoo.models.sources.cache_root`:
`$ZOO_CACHE` or `~/.cache/variant-zoo`). The key is a sha256 over the policy settings (seed, shape,
pre-training steps / size / lr), the class names, `CACHE_VERSION`, the source files that build and
pre-train the model and draw its images (`_CODE_FILES`), and the torch and transformers versions: a
change to any of them gives a new folder, never stale weights. The folder is written to a temporary
sibling and renamed into place (as `zoo.models.arms.arms_model_dir`), so a reader never sees half of
one; two processes that pre-train at once both write identical weights and the first rename wins.
`cache: false` in the policy settings pre-trains in memory and writes nothing; so does
`pretrain_steps: 0` (random weights, nothing to save).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from zoo.config.tta import PolicySpec
from zoo.models import dual_encoder as _dual_encoder_module
from zoo.models.dual_encoder import DualEncoder, pretrain_contrastive, tiny_dual_encoder
from zoo.models.sources import cache_root
from zoo.tasks import shapes as _shapes_module
from zoo.tasks.base import derive_seed
from zoo.tasks.shapes import classes, shape_rows

CACHE_VERSION = 1  # bump when pre-training changes in a way the hashed files below do not show
_MARKER = "zoo_dual_encoder.json"  # written last into a finished folder: the settings it was built from
_WEIGHTS = "model.safetensors"
_CODE_FILES = (_dual_encoder_module.__file__, _shapes_module.__file__, __file__)


def cache_key(spec: PolicySpec) -> dict:
    """Everything the pre-trained weights depend on (the `cache` flag itself excluded)."""
    import transformers

    code = hashlib.sha256(b"".join(Path(f).read_bytes() for f in _CODE_FILES)).hexdigest()
    settings = spec.model_dump(exclude={"cache"})
    return {"settings": settings, "classes": classes(), "version": CACHE_VERSION, "code": code,
            "torch": torch.__version__, "transformers": transformers.__version__}  # fmt: skip


def cache_dir(spec: PolicySpec, root: Path | None = None) -> Path:
    """`<root>/models/dual_encoder-<first 16 hex of sha256(cache_key)>`; root defaults to `cache_root()`."""
    digest = hashlib.sha256(json.dumps(cache_key(spec), sort_keys=True).encode()).hexdigest()[:16]
    return (root if root is not None else cache_root()) / "models" / f"dual_encoder-{digest}"


def pretrain(spec: PolicySpec) -> DualEncoder:
    """The tiny dual encoder of `spec`, pre-trained on `pretrain_size` clean tta_shapes images (seed
    `derive_seed(seed, "pretrain")`, never a test seed's rows) for `pretrain_steps` (0: random weights)."""
    enc = tiny_dual_encoder(classes(), spec.seed, image_size=spec.image_size, hidden=spec.hidden, layers=spec.layers)
    if spec.pretrain_steps:
        rows = shape_rows(spec.pretrain_size, derive_seed(spec.seed, "pretrain"), image_size=spec.image_size)
        images, labels = [r["images"][0] for r in rows], [r["answer"] for r in rows]
        pretrain_contrastive(enc, images, labels, steps=spec.pretrain_steps, lr=spec.pretrain_lr, seed=spec.seed)
    return enc


def pretrained_dual_encoder(spec: PolicySpec, root: Path | None = None) -> DualEncoder:
    """`pretrain(spec)`, read from the cache when this key was built before, else built and written."""
    if not spec.cache or not spec.pretrain_steps:  # random weights are built in milliseconds
        return pretrain(spec)
    from safetensors.torch import load_file, save_file

    out = cache_dir(spec, root)
    if (out / _MARKER).is_file():
        enc = tiny_dual_encoder(
            classes(), spec.seed, image_size=spec.image_size, hidden=spec.hidden, layers=spec.layers
        )
        enc.model.load_state_dict(load_file(out / _WEIGHTS), strict=True)
        return enc
    enc = pretrain(spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        state = {k: v.detach().contiguous() for k, v in enc.model.state_dict().items()}
        save_file(state, tmp / _WEIGHTS)
        (tmp / _MARKER).write_text(json.dumps(cache_key(spec), indent=1) + "\n")
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, out)
        except OSError:  # another process renamed its copy first: the same key, the same weights
            if not (out / _MARKER).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return enc
