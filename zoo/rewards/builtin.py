"""Built-in reward functions: `correctness`, `format`, `length`.

A reward function takes `(completions: list[str], rows: list[dict])` (the completion texts and their
task rows, same length N) and keyword-only hyperparameters, and returns N floats (None where the
reward cannot be computed; `compute_rewards` turns None and exceptions into NaN). Each declares
`discrete=` (whether its values tie often), which `zoo validate` uses to warn about an equality
filter (`dynamic_sampling`) on a continuous metric.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Mapping

from zoo.core.registry import register
from zoo.rewards.extract import FALLBACKS, extract_answer, extract_boxed

log = logging.getLogger(__name__)
BOXED_PATTERN = r"\\boxed\{.+?\}"


def _check_correctness(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["fallback"] not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}, got {params['fallback']!r}")
    if params["timeout"] is not None and params["timeout"] < 0:
        raise ValueError(f"timeout must be >= 0 or null, got {params['timeout']}")


def _rg_score(completion: str, row: Mapping[str, Any], fallback: str) -> float | None:
    from zoo.tasks.reasoning_gym import scorer

    entry = row["rg_entry"]
    spec = row.get("rg_spec") or {"dataset": entry["metadata"]["source_dataset"], "config": {}}
    answer = extract_answer(completion, fallback)
    if answer is None:
        return 0.0
    try:
        return float(scorer(spec["dataset"], spec["config"])(answer=answer, entry=entry))
    except Exception as e:  # a scorer crash is not the model's fault: leave the row out (NaN)
        log.debug("reasoning_gym scorer %s raised %r on %r", spec["dataset"], e, answer)
        return None


def _parse_gold(gold: str, timeout: int | None) -> list:
    from math_verify import parse

    for text in (gold, f"${gold}$", f"\\boxed{{{gold}}}"):
        parsed = parse(text, parsing_timeout=timeout)
        if parsed:
            return parsed
    return []


def _math_score(completion: str, row: Mapping[str, Any], fallback: str, timeout: int | None) -> float | None:
    from math_verify import parse, verify

    if fallback == "none" and extract_boxed(completion) is None:
        return 0.0
    gold = _parse_gold(str(row["answer"]), timeout)
    if not gold:
        return None  # the gold answer is not maths math-verify can read: no score, not a wrong one
    pred = parse(completion, parsing_timeout=timeout)
    return 1.0 if pred and verify(gold, pred, timeout_seconds=timeout) else 0.0


@register("reward", "correctness", check=_check_correctness, discrete=True, accuracy=True)
def correctness(
    completions: list[str], rows: list[dict], *, fallback: str = "last_number", timeout: int | None = 5
) -> list[float | None]:
    """Score in [0, 1] of each completion's final answer against its row's gold answer.

    reasoning_gym rows (with `rg_entry`): the dataset's own `score_answer(answer, entry)` on the
    extracted answer (`zoo.rewards.extract.extract_answer`: the last \\boxed{} content; without a box,
    `fallback` = "last_number" (last number, else the whole stripped text), "text" or "none" (score
    0)). reasoning_gym gives partial credit (gold "1", answer "13" -> 0.5); the score is kept, and
    accuracy counts score == 1.0 only (`zoo.rewards.accuracy`).
    Other rows: math-verify, `verify(parse(gold), parse(completion))` -> 1.0 or 0.0; math-verify
    finds the answer itself (boxed first). With fallback "none" an unboxed completion scores 0.
    None (NaN) when the gold cannot be parsed or a reasoning_gym scorer raises.
    `timeout` (seconds) bounds math-verify's parse/verify; it uses SIGALRM, so it applies only in
    the main thread (elsewhere it runs without a timeout).
    """
    t = timeout if timeout and threading.current_thread() is threading.main_thread() else None
    out: list[float | None] = []
    for completion, row in zip(completions, rows, strict=True):
        if "rg_entry" in row:
            out.append(_rg_score(completion, row, fallback))
        else:
            out.append(_math_score(completion, row, fallback, t))
    return out


def _check_format(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["pattern"] is not None:
        try:
            re.compile(params["pattern"])
        except re.error as e:
            raise ValueError(f"pattern {params['pattern']!r} is not a valid regex: {e}") from e


@register("reward", "format", check=_check_format, discrete=True)
def format_reward(completions: list[str], rows: list[dict], *, pattern: str | None = None) -> list[float]:
    """1.0 where the completion contains a match of `pattern` (re.search, DOTALL), else 0.0.
    Default pattern `\\\\boxed\\{.+?\\}`: a non-empty \\boxed{...}."""
    rx = re.compile(pattern if pattern is not None else BOXED_PATTERN, re.DOTALL)
    return [1.0 if rx.search(c) else 0.0 for c in completions]


def _check_length(params: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    if params["target"] is not None and params["target"] <= 0:
        raise ValueError(f"target must be > 0 or null, got {params['target']}")
    if params["scale"] <= 0:
        raise ValueError(f"scale must be > 0, got {params['scale']}")


@register("reward", "length", check=_check_length, discrete=False)
def length(completions: list[str], rows: list[dict], *, target: int | None = None, scale: float = 100.0) -> list[float]:
    """A length objective, in characters of the completion text (no tokenizer needed).

    target None: len(completion) / scale (unbounded, high variance: a second objective whose scale
    differs from correctness, as MO-GRPO studies). target > 0: -|len - target| / target (0 at the
    target, more negative away from it)."""
    if target is None:
        return [len(c) / scale for c in completions]
    return [-abs(len(c) - target) / target for c in completions]
