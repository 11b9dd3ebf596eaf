"""`zoo rm pairs PAIRS.yaml`: preference pairs from a task with gold answers, made by sampling the policy
itself: for each prompt, `samples` completions are judged (`judge`, default `correctness`: score 1.0 is
correct) and one correct completion is paired, as chosen, with one incorrect one, as rejected.

A stated confound makes a deliberately flawed proxy reward model (Gao et al. arXiv 2210.10760 study
proxy vs gold; reward models favour longer responses, Singhal et al. arXiv 2310.03716):

- `length_bias: b`: the chosen completion is the longer one (in characters) in a fraction b of the
  pairs. Each prompt's possible pairs fall into "chosen longer" and "chosen shorter" (equal lengths are
  never used then); a prompt that has only one kind gets that kind, and the prompts that have both are
  assigned, at random, so that round(b x pairs) pairs are "chosen longer" (when the prompts allow it;
  otherwise as close as they allow, and the summary says the fraction reached). Without length_bias a
  pair is drawn uniformly from all correct x incorrect pairs.
- `label_noise: q`: a pair whose rejected (incorrect) completion is the longer one is flipped with
  probability q, so the longer incorrect completion is preferred (noise that follows length).

Seeded (`seed`): prompts, sampling, pair choice and noise. Each JSONL line: prompt (chat messages),
chosen, rejected, chosen_correct, chosen_longer, question, answer. The output is never overwritten.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Sequence

import torch

from zoo.rm.config import PairsConfig


def _sample(policy: Any, tok: Any, rows: list[dict[str, Any]], cfg: PairsConfig, progress: bool) -> list[list[str]]:
    """`cfg.samples` completion texts per row."""
    from zoo.backends.generate.hf import generate_rollout

    per = max(1, 32 // cfg.samples)  # prompts per generate call (32 rows)
    out: list[list[str]] = []
    for i in range(0, len(rows), per):
        chunk = rows[i : i + per]
        b = generate_rollout(
            policy,
            tok,
            [r["prompt"] for r in chunk],
            group_size=cfg.samples,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
        )
        out += [b.texts[j * cfg.samples : (j + 1) * cfg.samples] for j in range(len(chunk))]
        if progress:
            print(f"sampled {len(out)}/{len(rows)} prompts", flush=True)
    return out


def choose_pairs(
    correct: Sequence[Sequence[str]],
    wrong: Sequence[Sequence[str]],
    *,
    length_bias: float | None,
    label_noise: float,
    rng: random.Random,
) -> list[tuple[int, str, str, bool] | None]:
    """Per prompt: (prompt index, chosen, rejected, chosen_correct) or None (no pair: all correct, all
    wrong, or only equal lengths under length_bias). correct[p], wrong[p]: the prompt's correct and
    incorrect completions. The rules are the module doc's."""
    n = len(correct)
    kinds: list[dict[str, list[tuple[str, str]]]] = []
    for p in range(n):
        allp = [(c, w) for c in correct[p] for w in wrong[p]]
        kinds.append(
            {
                "all": allp,
                "longer": [(c, w) for c, w in allp if len(c) > len(w)],
                "shorter": [(c, w) for c, w in allp if len(c) < len(w)],
            }
        )
    assign: list[str | None] = [None] * n
    if length_bias is None:
        assign = ["all" if k["all"] else None for k in kinds]
    else:
        both = [p for p in range(n) if kinds[p]["longer"] and kinds[p]["shorter"]]
        for p in range(n):
            if p not in both:
                assign[p] = "longer" if kinds[p]["longer"] else "shorter" if kinds[p]["shorter"] else None
        usable = sum(a is not None for a in assign) + len(both)
        need = round(length_bias * usable) - sum(a == "longer" for a in assign)
        rng.shuffle(both)
        for j, p in enumerate(both):
            assign[p] = "longer" if j < need else "shorter"
    out: list[tuple[int, str, str, bool] | None] = []
    for p in range(n):
        if assign[p] is None:
            out.append(None)
            continue
        c, w = rng.choice(kinds[p][assign[p]])
        if label_noise and len(w) > len(c) and rng.random() < label_noise:
            out.append((p, w, c, False))  # the longer incorrect completion preferred
        else:
            out.append((p, c, w, True))
    return out


def make_pairs(
    cfg: PairsConfig, policy: Any, tok: Any, rows: list[dict[str, Any]], *, progress: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(pair records, summary) from `rows` (task rows with gold answers; the first `cfg.prompts` after a
    seeded shuffle are used), sampling `policy`. Raises ValueError when the judge does not resolve."""
    from zoo.rewards.compute import compute_rewards, resolve_reward

    judge = resolve_reward(cfg.judge)
    rng = random.Random(cfg.seed)
    rows = list(rows)
    rng.shuffle(rows)
    rows = rows[: cfg.prompts]
    torch.manual_seed(cfg.seed)
    texts = _sample(policy, tok, rows, cfg, progress)
    flat = [t for ts in texts for t in ts]
    scores = compute_rewards([judge], flat, [r for r in rows for _ in range(cfg.samples)]).objectives[:, 0]
    ok = (scores == 1.0).view(len(rows), cfg.samples).tolist()
    bad = ((scores != 1.0) & ~torch.isnan(scores)).view(len(rows), cfg.samples).tolist()  # unscored: neither
    correct = [[t for t, k in zip(ts, oks) if k] for ts, oks in zip(texts, ok)]
    wrong = [[t for t, k in zip(ts, ks) if k] for ts, ks in zip(texts, bad)]
    chosen = choose_pairs(correct, wrong, length_bias=cfg.length_bias, label_noise=cfg.label_noise, rng=rng)
    records = [
        {
            "prompt": rows[p]["prompt"],
            "chosen": c,
            "rejected": r,
            "chosen_correct": cc,
            "chosen_longer": len(c) > len(r),
            "question": rows[p].get("question"),
            "answer": rows[p].get("answer"),
        }
        for p, c, r, cc in (x for x in chosen if x is not None)
    ]
    n = max(len(records), 1)
    summary = {
        "pairs": len(records),
        "prompts": len(rows),
        "prompts_without_pair": len(rows) - len(records),
        "completion_accuracy": float(sum(map(sum, ok)) / max(len(flat), 1)),
        "chosen_longer_frac": sum(r["chosen_longer"] for r in records) / n,
        "chosen_correct_frac": sum(r["chosen_correct"] for r in records) / n,
        "length_bias": cfg.length_bias,
        "label_noise": cfg.label_noise,
        "seed": cfg.seed,
    }
    return records, summary


def make_pairs_file(cfg: PairsConfig, *, progress: bool = True) -> dict[str, Any]:
    """Load the policy and task, make the pairs, write `cfg.out_path()` (JSONL) and `<stem>.summary.json`
    next to it; returns the summary. Raises FileExistsError when the output exists, ValueError when no
    pair could be made (every completion correct, or every one wrong)."""
    from zoo.models import load_policy
    from zoo.tasks import load_task

    out = cfg.out_path()
    if out.exists():
        raise FileExistsError(f"{out}: pairs are already there; give another output (or name), or delete it")
    task = load_task(cfg.task)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    policy, tok = load_policy(cfg.model, device=device)
    policy.eval()
    records, summary = make_pairs(cfg, policy, tok, task.train, progress=progress)
    if not records:
        raise ValueError(
            f"no pairs: of {summary['prompts']} prompts none had both a correct and an incorrect completion "
            f"(completion accuracy {summary['completion_accuracy']:.2f}); raise samples or temperature, or "
            "use an easier or harder task"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(out)
    summary["output"] = str(out)
    Path(out.with_suffix(".summary.json")).write_text(json.dumps(summary, indent=2))
    return summary
