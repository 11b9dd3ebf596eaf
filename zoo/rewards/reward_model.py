"""The `reward_model` reward: a learned scalar reward model (`AutoModelForSequenceClassification`, one
label) scoring prompt + completion, as the classic RLHF pipeline does (Ziegler et al. arXiv 1909.08593
§2; InstructGPT arXiv 2203.02155 §3.5).

    rewards: [{name: reward_model, model: runs/rm/model, batch_size: 8, dtype: float32, max_length: 1024}, format]

- Text: the row's prompt (chat messages) plus the completion as the assistant turn, through the reward
  model's own chat template (`apply_chat_template(tokenize=False)`); without a template, plain text:
  the prompt's message contents joined by blank lines, a newline, then the completion.
- Tokens: the reward model's tokenizer, left padding, truncated from the LEFT to `max_length` tokens
  (the end, where the score is read, is kept).
- Score: the head applied to the hidden state of the LAST REAL TOKEN (the last position whose attention
  mask is 1), with position ids from the mask (C10). The pooling is done here rather than by
  transformers, which finds the last token by comparing ids with `pad_token_id`: where pad = eos (as in
  SmolLM2) the eos closing each chat turn would count as padding. `pad_token_id` is still set
  explicitly on the config (the tokenizer's pad, eos where it has none) so the checkpoint stays usable
  by other tools' batched calls.
- Memory: loaded once per run on the run's device (session `setup`), scored in micro-batches of
  `batch_size` under `torch.no_grad`; its weights count in `perf/peak_mem_mb` (the process's peak).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

from zoo.core.registry import register
from zoo.models.forward import inner_lm, position_ids_from_mask
from zoo.rewards.session import score_once

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_reward_model(model: str, dtype: str = "float32", device: torch.device | str = "cpu") -> tuple[nn.Module, Any]:
    """(model in eval mode on `device`, tokenizer with left padding and a pad token) from an HF id or a
    local directory holding a sequence-classification checkpoint with one label.
    Raises ValueError naming the model when it cannot be loaded, is a causal LM rather than a sequence
    classifier (`checkpoint_error`, from config.json before any weight loads) or has num_labels != 1."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from zoo.models.load_errors import model_load_error
    from zoo.models.sources import EMBEDDED_MODEL, resolve_model

    src = resolve_model(model)
    bad = checkpoint_error(src.path)  # before the weights: no load report of mismatched keys first
    if bad:
        raise ValueError(f"reward_model {model!r}: {bad}")
    try:
        tok = AutoTokenizer.from_pretrained(src.path)
        rm = AutoModelForSequenceClassification.from_pretrained(src.path, dtype=DTYPES[dtype])
    except (OSError, ValueError) as e:
        raise model_load_error(src.name, src.path, src.kind, e, embedded=EMBEDDED_MODEL) from None
    if rm.config.num_labels != 1:
        raise ValueError(
            f"reward_model {model!r}: a reward model has one label (a scalar score), this checkpoint "
            f"has num_labels={rm.config.num_labels}"
        )
    prepare_rm_tokenizer(tok, rm)
    rm.to(device).eval()
    return rm, tok


def prepare_rm_tokenizer(tok: Any, rm: nn.Module) -> Any:
    """Left padding, a pad token (eos where there is none) and `rm.config.pad_token_id` set to it."""
    tok.padding_side = "left"
    tok.truncation_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    rm.config.pad_token_id = tok.pad_token_id
    return tok


def score_head(rm: nn.Module) -> nn.Module:
    """The scalar head of a sequence-classification model (under a peft wrapper: its trained copy;
    `score` for decoder models: Llama, Qwen,
    Mistral, GPT-2, ...). Raises ValueError naming the class when there is none."""
    head = getattr(inner_lm(rm), "score", None)
    if not isinstance(head, nn.Module):
        raise ValueError(
            f"reward model {type(rm).__name__} has no `score` head; zoo reads decoder reward models "
            "(AutoModelForSequenceClassification of a causal LM: Llama, Qwen2, Mistral, GPT-2, ...)"
        )
    return head


def as_messages(prompt: Any) -> list[dict[str, Any]]:
    """A prompt as chat messages: a string becomes one user turn; a list of messages is kept."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def chat_text(tok: Any, messages: Sequence[Mapping[str, Any]]) -> str:
    """A conversation as the reward model reads it: `tok`'s chat template, or plain text without one
    (the earlier turns' contents joined by blank lines, a newline, the last turn's content)."""
    if getattr(tok, "chat_template", None):
        return tok.apply_chat_template(list(messages), tokenize=False)
    contents = [str(m["content"]) for m in messages]
    return "\n\n".join(contents[:-1]) + "\n" + contents[-1]


def rm_texts(tok: Any, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The texts the reward model reads: prompt + completion (as the assistant turn) through `chat_text`.
    rows: task rows with `prompt` (chat messages or a string)."""
    return [
        chat_text(tok, as_messages(r.get("prompt", r.get("question", ""))) + [{"role": "assistant", "content": c}])
        for c, r in zip(completions, rows, strict=True)
    ]


def last_real_index(attention_mask: Tensor) -> Tensor:
    """[B, L] mask -> [B] long: the position of the last 1 in each row (left or right padding)."""
    L = attention_mask.shape[1]
    return L - 1 - attention_mask.long().flip(-1).argmax(-1)


@torch.no_grad()
def score_batch(rm: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Scores [B] float32 of padded rows (input_ids, attention_mask [B, L]), without gradient."""
    return pooled_scores(rm, input_ids, attention_mask)


def pooled_scores(rm: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Scores [B] float32 of padded rows (input_ids, attention_mask [B, L]): the head on the last real
    token's hidden state (module doc); with gradient (reward-model training, zoo.rm.train)."""
    out = inner_lm(rm).base_model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )
    h = out.last_hidden_state  # [B, L, H]
    idx = last_real_index(attention_mask)
    pooled = h[torch.arange(h.shape[0], device=h.device), idx]  # [B, H]
    return score_head(rm)(pooled).float().squeeze(-1)  # [B]


def score_texts(
    rm: nn.Module, tok: Any, texts: Sequence[str], *, batch_size: int = 8, max_length: int = 1024
) -> list[float]:
    """One score per text, in micro-batches of `batch_size` (each padded on its own, left), texts
    truncated from the left to `max_length` tokens. Special tokens are added only for plain text (a chat
    template writes its own)."""
    device = next(rm.parameters()).device
    special = not getattr(tok, "chat_template", None)
    scores: list[float] = []
    for i in range(0, len(texts), batch_size):
        enc = tok(
            list(texts[i : i + batch_size]),
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=max_length,
            add_special_tokens=special,
        )
        scores += score_batch(rm, enc["input_ids"].to(device), enc["attention_mask"].to(device)).tolist()
    return scores


class RewardModelSession:
    """The run's reward model: loaded at `setup(device)`, scoring `(completions, rows)`, freed at
    `teardown()` (zoo.rewards.session)."""

    def __init__(self, *, model: str, batch_size: int = 8, dtype: str = "float32", max_length: int = 1024):
        self.model_name, self.batch_size, self.dtype, self.max_length = model, batch_size, dtype, max_length
        self.model: nn.Module | None = None
        self.tokenizer: Any = None

    def setup(self, device: torch.device) -> None:
        self.model, self.tokenizer = load_reward_model(self.model_name, self.dtype, device)

    def __call__(self, completions: list[str], rows: list[dict]) -> list[float]:
        if self.model is None:
            raise RuntimeError(f"reward_model {self.model_name!r} is not set up (call setup(device) first)")
        return score_texts(
            self.model,
            self.tokenizer,
            rm_texts(self.tokenizer, completions, rows),
            batch_size=self.batch_size,
            max_length=self.max_length,
        )

    def teardown(self) -> None:
        self.model = self.tokenizer = None


def missing_models(specs: Sequence[Any]) -> list[str]:
    """One warning per `reward_model` spec (in a run's `rewards` or `gold`) whose model is a local path
    that does not exist yet (a study builds it first with `zoo rm train`; the run fails when it loads)."""
    from pathlib import Path

    out = []
    for spec in specs:
        m = str(spec.get("model", "")) if isinstance(spec, Mapping) and spec.get("name") == "reward_model" else ""
        if m.startswith((".", "/", "~")) or m.count("/") > 1:
            if not Path(m).expanduser().exists():
                out.append(
                    f"reward_model: {m} does not exist yet; build it (zoo rm train) before the run, which fails "
                    "when it loads the model"
                )
    return out


def checkpoint_error(path: Any) -> str | None:
    """Why the checkpoint in local directory `path` is not a reward model, from its config.json alone
    (`transformers.AutoConfig`, no weights): its `architectures` name a causal LM (...ForCausalLM) and
    no sequence classifier, or a sequence classifier with num_labels != 1, or it is a local directory
    without config.json. None when it is one, or when `path` is not a local directory (an HF id, or not
    built yet)."""
    from pathlib import Path

    from transformers import AutoConfig

    d = Path(str(path)).expanduser()
    if d.is_dir() and not (d / "config.json").is_file():
        return (
            f"{d}: no config.json in this directory; a reward model directory holds config.json, the weights "
            "and the tokenizer files (zoo rm train writes one)"
        )
    if not (d / "config.json").is_file():
        return None
    try:
        cfg = AutoConfig.from_pretrained(str(d))
    except (OSError, ValueError) as e:
        return f"{d}: config.json does not load ({' '.join(str(e).split())[:200]})"
    archs = list(getattr(cfg, "architectures", None) or [])
    if any(a.endswith("ForSequenceClassification") for a in archs):
        if cfg.num_labels != 1:
            return (
                f"{d}: a reward model has one label (a scalar score), this checkpoint has num_labels={cfg.num_labels}"
            )
        return None
    if any(a.endswith("ForCausalLM") for a in archs):
        return (
            f"{d} is a causal language model, not a reward model (a one-label "
            "AutoModelForSequenceClassification): train one with `zoo rm train`"
        )
    return None


def _check_reward_model(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if not str(params["model"]).strip():
        raise ValueError("model must name an HF id or a local directory with a reward model")
    bad = checkpoint_error(params["model"])
    if bad:
        raise ValueError(bad)
    if not isinstance(params["batch_size"], int) or params["batch_size"] < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {params['batch_size']!r}")
    if params["dtype"] not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {params['dtype']!r}")
    if not isinstance(params["max_length"], int) or params["max_length"] < 2:
        raise ValueError(f"max_length must be an integer >= 2, got {params['max_length']!r}")


@register("reward", "reward_model", check=_check_reward_model, discrete=False, session=RewardModelSession)
def reward_model(
    completions: list[str],
    rows: list[dict],
    *,
    model: str,
    batch_size: int = 8,
    dtype: str = "float32",
    max_length: int = 1024,
) -> list[float]:
    """A learned reward model's scalar score of prompt + completion (zoo.rewards.reward_model: chat
    template, score at the last real token). In a run the model loads once (a session on the run's
    device); called directly it loads for this call only, on CPU. model: HF id or local directory
    (`zoo rm train` writes one); dtype: float32 | bfloat16 | float16; max_length in tokens.
    Source: Ziegler et al. arXiv 1909.08593 §2; InstructGPT arXiv 2203.02155 §3.5."""
    return score_once(
        RewardModelSession, completions, rows, model=model, batch_size=batch_size, dtype=dtype, max_length=max_length
    )
