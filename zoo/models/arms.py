"""A model source built in code: a tiny policy whose only sampleable tokens are a bandit's arms.

    model: "arms:a,b"          # in a run or study file (docs/reference/run-file.md, Run file `model`)
    model: "arms:a,b+eos"      # the same, but a completion is a string of arms ended by a sampleable EOS

`arms_model_dir(name)` builds it once into `<cache root>/models/arms-<tokens>` (no file, no network):

- a tokenizer (`tokenizers` WordLevel, one character per token) whose vocabulary is the five ChatML
  special tokens of `zoo.models.chatml` (`<|pad|>`, `<|bos|>`, `<|im_end|>`, `<|im_start|>`, `<unk>`) plus
  one token per arm; every other character of a prompt reads as `<unk>`;
- a tiny `PhiForCausalLM` (hidden 32, 1 layer; Phi because its `lm_head` has a bias): the head's
  weight is zero and its bias is 0 for the arms and -1e4 for the special tokens, so the first
  completion token is an arm with probability 1 - O(e^-1e4) (exactly 1 in float32) and both arms start
  at probability 1/K. The special tokens' logits have exactly zero gradient (their probability is 0),
  so training never makes them sampleable;
- `generation_config.eos_token_id` = [`<|im_end|>`, every arm]: a one-token completion that is an arm
  ends the completion (it is not marked truncated under `max_new_tokens: 1`; its text is the arm).
  With `+eos`: the arms are not stop tokens and `<|im_end|>` has bias 0 too, so a completion is a
  string of arms of random length (each token an arm or EOS, 1/(K+1) each at the start) that can
  ramble up to `max_new_tokens` (experiments/length_bias.yaml).

Used by `experiments/mo_grpo_bandit.yaml` (MO-GRPO arXiv:2509.22047, §5.1's bandit domain).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from zoo.models.chatml import char_tokenizer

ARMS_PREFIX = "arms:"
EOS_SUFFIX = "+eos"
SPECIAL_LOGIT = -1.0e4
_MARKER = "zoo_source.json"
_VERSION = 1  # bump when the construction changes: the cache folder name includes it


def parse_arms(name: str) -> list[str]:
    """`"arms:a,b"` (or `"arms:a,b+eos"`) -> ["a", "b"]. Raises ValueError unless there are >= 2
    distinct single printable non-space characters (each arm is one token of the vocabulary)."""
    body = name[len(ARMS_PREFIX) :] if name.startswith(ARMS_PREFIX) else name
    body = body.removesuffix(EOS_SUFFIX)
    arms = [a.strip() for a in body.split(",")]
    if (
        len(arms) < 2
        or len(set(arms)) != len(arms)
        or any(len(a) != 1 or not a.isprintable() or a.isspace() or a == "," for a in arms)
    ):
        raise ValueError(
            f"model {name!r}: write {ARMS_PREFIX}<arm>,<arm>[,...] with at least two distinct "
            "single-character arms, e.g. 'arms:a,b'"
        )
    return arms


def build_arms_model(arms: list[str], seed: int = 0, *, eos: bool = False):
    """(model, tokenizer) of the construction in the module docstring; deterministic given `seed`
    (the body's random init; the head starts at zero). eos: the `+eos` form (EOS sampleable, arms do
    not stop). The global torch RNG is left untouched."""
    from transformers import GenerationConfig, PhiConfig, PhiForCausalLM

    tok = char_tokenizer(arms)
    arm_ids = tok.convert_tokens_to_ids(arms)
    stops = [tok.eos_token_id] if eos else [tok.eos_token_id, *arm_ids]
    config = PhiConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=stops,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = PhiForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.zero_()
        model.lm_head.bias.fill_(SPECIAL_LOGIT)
        model.lm_head.bias[arm_ids + ([tok.eos_token_id] if eos else [])] = 0.0
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id, eos_token_id=stops
    )
    return model, tok


def arms_model_dir(name: str, root: Path) -> Path:
    """The local checkpoint of `name` ("arms:a,b") under `root/models/`, built on first use (written to
    a temporary sibling and renamed into place, so a reader never sees a partial one)."""
    arms, eos = parse_arms(name), name.endswith(EOS_SUFFIX)
    slug = re.sub(r"[^A-Za-z0-9]", lambda m: f"x{ord(m.group()):02x}", "".join(arms))
    out = root / "models" / f"arms-{slug}{'-eos' if eos else ''}-v{_VERSION}"
    if (out / _MARKER).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        model, tok = build_arms_model(arms, eos=eos)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps({"name": name, "arms": arms, "version": _VERSION}))
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, out)
        except OSError:  # another process renamed its copy first: theirs is as good
            if not (out / _MARKER).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out
