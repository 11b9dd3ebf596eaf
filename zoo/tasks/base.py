"""What every task loader shares: the `Task` record, spec checks, seeds and split drawing.

Splits are drawn in a fixed order so that none repeats a problem of another (compared by question
text with whitespace collapsed, `question_key`):

1. few-shot examples (seed `derive_seed(seed, "fewshot")`), distinct;
2. evaluation rows (seed `eval_seed`, default `derive_seed(seed, "eval")`), distinct, none a few-shot
   question;
3. training rows (seed `derive_seed(seed, "train")`), none an eval or few-shot question. Training rows
   may repeat each other: a procedural source is sampled i.i.d., and a small problem space (2-term
   1-digit arithmetic has ~3,000 distinct problems) repeats common problems.

Eval comes before train so that the eval set does not change with the training `size`, and so that
a training set covering most of a small problem space cannot leave the eval set empty.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from zoo.core.media import image_digest


class TaskError(ValueError):
    """A task spec that cannot be loaded: unknown name or key, bad value, missing column or data."""


@dataclass
class Task:
    """A loaded task.

    name: the task kind (`reasoning_gym`, `hf`, `jsonl`).
    train, eval: rows; each a dict with `prompt` (chat messages: optional system, few-shot
        user/assistant turns, then the user question), `question` (str, without the instruction),
        `answer` (str, gold), `source` ("reasoning_gym:<dataset>" or "hf:<path>"), `id` (str), and
        for reasoning_gym rows `rg_entry` (the entry for the dataset's scorer) and `rg_spec`
        ({"dataset", "config"}: which scorer to use).
    fewshot: the worked examples in every prompt, as {"question", "answer"} dicts.
    spec: the resolved spec (every key with the value in use).
    """

    name: str
    train: list[dict[str, Any]] = field(repr=False)
    eval: list[dict[str, Any]] = field(repr=False)
    spec: dict[str, Any]
    fewshot: list[dict[str, str]] = field(default_factory=list, repr=False)

    def __repr__(self) -> str:
        return (
            f"Task(name={self.name!r}, train={len(self.train)} rows, eval={len(self.eval)} rows, "
            f"fewshot={len(self.fewshot)}, spec={self.spec!r})"
        )


def derive_seed(seed: int, role: str) -> int:
    """A stable seed in [0, 2**31) for one role ("train", "eval", "fewshot", "stream:3" ...).

    Hashing keeps roles far apart: reasoning_gym items are `Random(seed + index)`, so the plain
    seeds s and s + 1 would give the same problems shifted by one."""
    digest = hashlib.sha256(f"{int(seed)}:{role}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def question_key(question: str) -> str:
    """The text used to compare problems across splits: whitespace collapsed, ends stripped."""
    return " ".join(str(question).split())


def row_key(row: Mapping[str, Any]) -> str:
    """What compares two rows as problems: `question_key` of the question, and of a row with `images`
    the images' digests too (`zoo.core.media.image_digest`: "Find x." about two figures is two problems)."""
    key = question_key(row["question"])
    if row.get("images"):
        key += "|" + ",".join(image_digest(x) for x in row["images"])
    return key


def check_keys(spec: Mapping[str, Any], allowed: Iterable[str], what: str) -> None:
    """Raise TaskError for keys of `spec` not in `allowed`, with close matches."""
    allowed = list(allowed)
    bad = [k for k in spec if k not in allowed]
    if bad:
        hints = []
        for k in bad:
            close = difflib.get_close_matches(str(k), allowed, n=1)
            hints.append(repr(k) + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TaskError(f"{what}: unknown key {', '.join(hints)}; allowed: {', '.join(sorted(allowed))}")


def check_int(
    spec: Mapping[str, Any], key: str, *, minimum: int, maximum: int | None = None, allow_none: bool = False
) -> None:
    """Raise TaskError unless spec[key] is an int in minimum..maximum (>= minimum without one; or None when
    allowed); the message gives the whole range."""
    v = spec.get(key)
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum or (maximum is not None and v > maximum):
        want = f"an integer in {minimum}..{maximum}" if maximum is not None else f"an integer >= {minimum}"
        want += " or null" if allow_none else ""
        raise TaskError(f"task key {key!r} must be {want}, got {v!r}")


def draw(
    candidates: Iterator[dict[str, Any]],
    n: int | None,
    *,
    exclude: set[str],
    distinct: bool,
    max_tries: int | None = None,
    what: str = "rows",
) -> list[dict[str, Any]]:
    """Take up to `n` items (all when n is None) from `candidates`, skipping questions in `exclude`
    (and repeats when `distinct`).

    Each candidate is a dict with at least `question`. Stops when `n` are taken, the candidates run
    out, or `max_tries` candidates were looked at. Raises TaskError when an infinite source
    (max_tries set) could not give `n` items: the problem space is too small for the split sizes.
    """
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    tries = 0
    for item in candidates:
        if n is not None and len(out) >= n:
            break
        if max_tries is not None and tries >= max_tries:
            raise TaskError(
                f"could only draw {len(out)} of {n} {what} after {tries} tries: the source has too few "
                f"distinct problems outside the other splits; lower size/eval_size/fewshot or widen the config"
            )
        tries += 1
        key = row_key(item)
        if key in exclude or (distinct and key in seen):
            continue
        seen.add(key)
        out.append(item)
    return out


def keys_of(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    return {row_key(r) for r in rows}


Loader = Callable[[dict[str, Any]], Task]
