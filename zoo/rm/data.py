"""Preference pairs for reward-model training: read from local JSONL or a `datasets` source, checked,
split into training and held-out pairs, and turned into the texts the reward model reads.

A pair: {"prompt": str | chat messages (optional when chosen/rejected are whole conversations),
"chosen": str | chat messages, "rejected": str | chat messages, "margin": float (optional)}. A string
response is the assistant's turn after the prompt; a message list is appended to the prompt's messages.
The text is `zoo.rewards.reward_model.chat_text` of those messages: the same formatting the
`reward_model` reward scores with, so the trained model reads at run time what it was trained on.
"""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from zoo.rewards.reward_model import as_messages, chat_text

log = logging.getLogger(__name__)

KEYS = ("chosen", "rejected")
#: the keys a pair may have (`zoo rm pairs` also writes the last four, as a record of how it was made)
ALLOWED_KEYS = ("prompt", "chosen", "rejected", "margin", "chosen_correct", "chosen_longer", "question", "answer")


@dataclass(frozen=True)
class Pair:
    """One comparison, as messages: prompt + chosen, prompt + rejected; margin None = the config's."""

    chosen: tuple[dict[str, Any], ...]
    rejected: tuple[dict[str, Any], ...]
    margin: float | None = None


def _response(prompt: list[dict[str, Any]], r: Any, where: str, key: str) -> tuple[dict[str, Any], ...]:
    if isinstance(r, str) and not r.strip() or isinstance(r, list) and not r:
        raise ValueError(f"{where}: {key!r} is empty: a pair compares two responses")
    if isinstance(r, str):
        return tuple(prompt + [{"role": "assistant", "content": r}])
    if isinstance(r, list) and r and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in r):
        return tuple(prompt + [dict(m) for m in r])
    raise ValueError(
        f"{where}: {key!r} must be a string or a list of chat messages ({{role, content}}), got {type(r).__name__}"
    )


def parse_pair(row: Mapping[str, Any], where: str, strict: bool = True) -> Pair:
    """One row -> Pair. Raises ValueError naming `where` (file:line) and the key: a missing or empty
    chosen/rejected, chosen identical to rejected (the same messages, so the same text: no preference),
    and with `strict` (a JSONL file; not a `datasets` source, whose extra columns are not the user's) a
    key not in ALLOWED_KEYS."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: a pair is a mapping with prompt, chosen, rejected; got {type(row).__name__}")
    unknown = [k for k in row if k not in ALLOWED_KEYS]
    if strict and unknown:
        raise ValueError(
            f"{where}: unknown {'key' if len(unknown) == 1 else 'keys'} {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(ALLOWED_KEYS[:4])} (and {', '.join(ALLOWED_KEYS[4:])}, which zoo rm "
            "pairs writes)"
        )
    missing = [k for k in KEYS if k not in row]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(map(repr, missing))} (a pair has prompt, chosen, rejected)")
    p = row.get("prompt")
    if p is not None and not isinstance(p, (str, list)):
        raise ValueError(f"{where}: 'prompt' must be a string or a list of chat messages, got {type(p).__name__}")
    prompt = as_messages(p) if p is not None else []
    margin = row.get("margin")
    if margin is not None and (
        isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin)
    ):
        raise ValueError(f"{where}: 'margin' must be a finite number, got {margin!r}")
    chosen, rejected = (
        _response(prompt, row["chosen"], where, "chosen"),
        _response(prompt, row["rejected"], where, "rejected"),
    )
    if chosen == rejected:
        raise ValueError(f"{where}: chosen and rejected are identical: the pair carries no preference")
    return Pair(chosen, rejected, None if margin is None else float(margin))


def read_jsonl_pairs(path: str | Path) -> list[Pair]:
    """Every pair of a JSONL file. Raises FileNotFoundError, or ValueError naming the file and line (also
    for a line that is not UTF-8 text)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"pairs file not found: {p}")
    out = []
    for i, raw in enumerate(p.read_bytes().splitlines(), 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{p}:{i}: not UTF-8 text (byte {raw[e.start : e.start + 1]!r} at column {e.start + 1}); "
                "re-save the file as UTF-8"
            ) from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{p}:{i}: not valid JSON ({e.msg}); expected one pair per line, "
                '{"prompt": ..., "chosen": ..., "rejected": ...}'
            ) from None
        except RecursionError:
            raise ValueError(f"{p}:{i}: nested too deeply to read; a pair is a flat mapping") from None
        out.append(parse_pair(row, f"{p}:{i}"))
    if not out:
        raise ValueError(f"{p}: no pairs in the file")
    return out


def read_dataset_pairs(name: str, config: str | None, split: str) -> list[Pair]:
    """Every pair of a `datasets` source (`load_dataset(name, config, split=split)`; offline: the local
    cache). Raises ValueError naming the source."""
    import datasets

    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds; one line naming the source
        local = local_json_problem(name)
        why = local or str(e).splitlines()[0]
        raise ValueError(f"data.dataset {name!r} (split {split!r}): could not load it: {why}") from None
    return [parse_pair(row, f"{name}[{split}] row {i}", strict=False) for i, row in enumerate(ds)]


def local_json_problem(source: str) -> str | None:
    """For a local `datasets` source (a .json/.jsonl file, or a folder of them) that failed to load: the
    first file and line that is not JSON, with the format expected; None when none is found (or the
    source is not local)."""
    from zoo.tasks.base import TaskError
    from zoo.tasks.files import check_json_file

    p = Path(source)
    files = sorted(p.rglob("*.json*")) if p.is_dir() else [p] if p.is_file() else []
    for f in files:
        try:
            check_json_file(str(f), row='{"prompt": ..., "chosen": ..., "rejected": ...}')
        except (TaskError, UnicodeDecodeError) as e:
            if isinstance(e, UnicodeDecodeError):
                return f"data file {str(f)!r} is not UTF-8 text (byte offset {e.start}); re-save it as UTF-8"
            return str(e)
    return None


def load_pairs(data: Any, seed: int) -> tuple[list[Pair], list[Pair]]:
    """(training pairs, held-out pairs) for a `PairData` (zoo.rm.config). Without `eval_path` the
    held-out pairs are `eval_size` pairs drawn with `seed`; raises ValueError when fewer than
    eval_size + 1 pairs exist. Held-out pairs that are also training pairs (same chosen and rejected
    messages: an eval_path repeating the training file, or repeated lines) are counted in a warning
    (log `zoo.rm.data`)."""
    pairs = read_jsonl_pairs(data.path) if data.path else read_dataset_pairs(data.dataset, data.config, data.split)
    if data.eval_path:
        held = read_jsonl_pairs(data.eval_path)
    else:
        if len(pairs) <= data.eval_size:
            raise ValueError(
                f"data: {len(pairs)} pairs, but data.eval_size = {data.eval_size} are held out; "
                "give more pairs, a smaller eval_size or an eval_path"
            )
        order = list(range(len(pairs)))
        random.Random(seed).shuffle(order)
        held = [pairs[i] for i in order[: data.eval_size]]
        pairs = [pairs[i] for i in sorted(order[data.eval_size :])]
    pairs = pairs[: data.limit] if data.limit else pairs
    seen = {pair_key(p) for p in pairs}
    both = sum(pair_key(h) in seen for h in held)
    if both:
        log.warning(
            "%d of %d held-out pairs also appear in the training pairs: the held-out accuracy is not held out",
            both,
            len(held),
        )
    return pairs, held


def pair_key(p: Pair) -> str:
    """A pair's chosen and rejected messages as one string (JSON): equal keys, the same comparison."""
    return json.dumps([p.chosen, p.rejected], sort_keys=True, default=str)


def pair_texts(tok: Any, pairs: list[Pair]) -> tuple[list[str], list[str]]:
    """(chosen texts, rejected texts) as the reward model reads them (`chat_text`)."""
    return [chat_text(tok, p.chosen) for p in pairs], [chat_text(tok, p.rejected) for p in pairs]
