"""`zoo rm train RM.yaml`: a scalar reward model trained on preference pairs with the Bradley-Terry
loss, -log sigmoid(r_chosen - r_rejected - margin) (Ouyang et al. InstructGPT arXiv 2203.02155 eq. 1;
the margin as Llama 2 arXiv 2307.09288 §3.2.2), averaged over the pairs of a step.

    summary = train_reward_model(load_config("rm.yaml", RMTrainConfig))

Writes `<output_dir>/{model/, metrics.jsonl, summary.json}`: `model/` is a plain HF checkpoint
(`AutoModelForSequenceClassification`, one label, LoRA merged, `pad_token_id` set) that the
`reward_model` reward loads as is. An existing `model/` is never overwritten (FileExistsError).
Scores are read as the reward reads them (zoo.rewards.reward_model: chat template, the last real
token), so what is trained is what a run scores. Held-out pairwise accuracy (the fraction of held-out
pairs with r_chosen > r_rejected) is measured before and after.

TRL's `RewardTrainer` is not used: it is not a dependency of zoo (trl would pull its own pinned
transformers/accelerate stack), and it pools as transformers does (the last id that is not
`pad_token_id`), which reads the wrong token when pad = eos (SmolLM2) and a text ends in eos; this loop
is ~60 lines, shares the reward's pooling and text formatting, and logs through zoo's tracker.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from zoo.rewards.reward_model import DTYPES, pooled_scores, prepare_rm_tokenizer, score_texts
from zoo.rm.config import RMTrainConfig
from zoo.rm.data import Pair, load_pairs, pair_texts

log = logging.getLogger(__name__)


def load_base(model: str, dtype: str, lora: dict | None) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) to train: `model` loaded as a one-label sequence classifier (a causal LM gets
    a fresh `score` head), with LoRA adapters when `lora` is given (peft task SEQ_CLS: the head trains
    in full). Raises ValueError naming the model when transformers cannot load it."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from zoo.models.load_errors import model_load_error
    from zoo.models.policy import apply_lora
    from zoo.models.sources import EMBEDDED_MODEL, resolve_model

    src = resolve_model(model)
    try:
        tok = AutoTokenizer.from_pretrained(src.path)
        rm = AutoModelForSequenceClassification.from_pretrained(src.path, num_labels=1, dtype=DTYPES[dtype])
    except (OSError, ValueError) as e:
        raise model_load_error(src.name, src.path, src.kind, e, embedded=EMBEDDED_MODEL) from None
    prepare_rm_tokenizer(tok, rm)
    if lora is not None:
        rm = apply_lora(rm, lora, task_type="SEQ_CLS")
    return rm, tok


def pairwise_accuracy(rm: torch.nn.Module, tok: Any, pairs: list[Pair], *, batch_size: int, max_length: int) -> float:
    """Fraction of pairs with score(chosen) > score(rejected) (a tie counts as wrong)."""
    was_training = rm.training
    rm.eval()
    chosen, rejected = pair_texts(tok, pairs)
    rc = score_texts(rm, tok, chosen, batch_size=batch_size, max_length=max_length)
    rr = score_texts(rm, tok, rejected, batch_size=batch_size, max_length=max_length)
    rm.train(was_training)
    return float(np.mean([c > r for c, r in zip(rc, rr)]))


def bradley_terry_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, margin: torch.Tensor) -> torch.Tensor:
    """mean over pairs of -log sigmoid(r_c - r_r - m); all [B] -> scalar (InstructGPT eq. 1)."""
    return -F.logsigmoid(r_chosen - r_rejected - margin).mean()


def _step(
    rm: torch.nn.Module, tok: Any, batch: list[Pair], cfg: RMTrainConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    chosen, rejected = pair_texts(tok, batch)
    enc = tok(
        chosen + rejected,
        return_tensors="pt",
        padding=True,
        truncation=True,
        max_length=cfg.max_length,
        add_special_tokens=not getattr(tok, "chat_template", None),
    )
    device = next(rm.parameters()).device
    r = pooled_scores(rm, enc["input_ids"].to(device), enc["attention_mask"].to(device))  # [2B]
    rc, rr = r[: len(batch)], r[len(batch) :]
    m = torch.tensor([cfg.margin if p.margin is None else p.margin for p in batch], device=device)
    loss = bradley_terry_loss(rc, rr, m)
    rc, rr = rc.detach(), rr.detach()
    return loss, {
        "loss": float(loss.detach()),
        "accuracy": float((rc > rr).float().mean()),
        "reward/margin": float((rc - rr).mean()),
        "reward/chosen": float(rc.mean()),
    }


def train_reward_model(cfg: RMTrainConfig, *, progress: bool = True) -> dict[str, Any]:
    """Train, evaluate before/after, save; returns the summary (also `<output_dir>/summary.json`).
    Raises FileExistsError when `<output_dir>/model` exists, ValueError for bad pairs or a model that
    does not load."""
    from zoo.models.export import save_hf_checkpoint
    from zoo.run.tracking import Tracker

    out = cfg.out_dir()
    if (out / "model").exists():
        raise FileExistsError(
            f"{out / 'model'}: a reward model is already there; give another output_dir (or name), "
            "or delete it to train again"
        )
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    train_pairs, held = load_pairs(cfg.data, cfg.seed)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    lora = cfg.model_opts.lora.model_dump() if cfg.model_opts.lora else None
    rm, tok = load_base(cfg.model, cfg.model_opts.dtype, lora)
    rm.to(device)
    acc = dict(batch_size=cfg.batch_size * 2, max_length=cfg.max_length)
    before = pairwise_accuracy(rm, tok, held, **acc)
    params = [p for p in rm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    tracker = Tracker(
        out,
        config=cfg.model_dump(mode="json"),
        wandb_opts=cfg.tracking.wandb_opts(),
        name=cfg.name,
        job_type="rm_train",
    )
    tracker.log({"eval/accuracy": before}, step=0)
    n_steps = cfg.epochs * -(-len(train_pairs) // cfg.batch_size)
    rng, step, t0 = random.Random(cfg.seed), 0, time.perf_counter()
    rm.train()
    with _bar(progress, n_steps) as bar:
        for _ in range(cfg.epochs):
            order = list(range(len(train_pairs)))
            rng.shuffle(order)
            for i in range(0, len(order), cfg.batch_size):
                loss, m = _step(rm, tok, [train_pairs[j] for j in order[i : i + cfg.batch_size]], cfg)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.max_grad_norm:
                    m["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
                opt.step()
                step += 1
                tracker.log(m, step=step)
                bar(step, m)
    after = pairwise_accuracy(rm, tok, held, **acc)
    tracker.log({"eval/accuracy": after}, step=step)
    rm.eval()
    path = save_hf_checkpoint(rm, tok, out / "model")
    summary = {
        "status": "finished",
        "model": str(path),
        "pairs/train": len(train_pairs),
        "pairs/eval": len(held),
        "steps": step,
        "eval/accuracy/before": before,
        "eval/accuracy/after": after,
        "time/total_s": time.perf_counter() - t0,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    tracker.set_summary(summary)
    tracker.finish(0)
    return summary


class _bar:
    """A rich progress bar over the optimizer steps, with the loss and the batch accuracy."""

    def __init__(self, enabled: bool, total: int):
        self.enabled, self.total = enabled, total

    def __enter__(self):
        if not self.enabled:
            return lambda step, m: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.p = Progress(
            TextColumn("[bold]rm step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self.p.__enter__()
        task = self.p.add_task("rm", total=self.total, info="")
        return lambda step, m: self.p.update(task, completed=step, info=f"loss {m['loss']:.3f} acc {m['accuracy']:.2f}")

    def __exit__(self, *exc):
        if self.enabled:
            self.p.__exit__(*exc)
        return False
