"""Question/answer tasks from a Hugging Face dataset or a local json/jsonl/parquet/csv file.

    {name: hf, path: openai/gsm8k, subset: main, split: train, prompt_column: question,
     answer_column: answer, answer_pattern: "####\\s*(.+)$", size: null, seed: 0, eval_size: 64,
     eval_split: null, eval_seed: null, fewshot: 0, system: null, instruction: ..., fewshot_answer: ...}
    {name: jsonl, path: data/train.jsonl, ...}   # the same loader; `path` must be a local file

Loading goes through `datasets.load_dataset` (local files by extension: .json/.jsonl -> "json",
.parquet, .csv). A Hub id needs the network or the local HF cache (HF_HUB_OFFLINE=1 uses the cache).
`answer_pattern` (optional regex) keeps its first group (or the whole match) of each answer, e.g.
the number after GSM8K's "####" (an answer it does not match stays whole, with a warning; matching
no answer is a TaskError). Without `eval_split`, the eval rows are held out of `split`; for a
local file, `eval_split` is the path of a second file and `split` is not used. Rows whose question or
answer is null are skipped. `image_column` (optional) names a column of images (one image or a list
per row; a `datasets` Image feature gives PIL images): each row then carries them under `images` for a
vision-language policy (docs/guides/images.md); `<image>` tags are taken out of the question, and two
rows are one problem only when their images agree too (`zoo.tasks.base.row_key`).
`size: null` takes every remaining row for training.
"""

from __future__ import annotations

import logging
import os
import random
import re
from typing import Any, Iterator, Mapping

from zoo.tasks.base import Task, TaskError, check_int, check_keys, derive_seed, draw, keys_of
from zoo.tasks.fewshot import DEFAULT_FEWSHOT_ANSWER, DEFAULT_INSTRUCTION, check_fewshot, finish_rows, given_fewshot
from zoo.tasks.files import check_data_file, check_json_file

DEFAULTS: dict[str, Any] = {
    "name": "hf",
    "path": None,
    "subset": None,
    "split": "train",
    "prompt_column": "question",
    "answer_column": "answer",
    "answer_pattern": None,
    "image_column": None,
    "size": None,
    "seed": 0,
    "eval_size": 64,
    "eval_split": None,
    "eval_seed": None,
    "fewshot": 0,
    "system": None,
    "instruction": DEFAULT_INSTRUCTION,
    "fewshot_answer": DEFAULT_FEWSHOT_ANSWER,
}
log = logging.getLogger(__name__)
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def _load_split(path: str, subset: str | None, split: str, local_only: bool) -> Any:
    import datasets  # lazy: ~0.8 s

    ext = os.path.splitext(path)[1].lower()
    is_file = os.path.isfile(path)
    if local_only and not is_file:
        raise TaskError(f"jsonl task: no file {path!r}")
    try:
        if is_file:
            if ext not in FILE_BUILDERS:
                raise TaskError(f"file {path!r}: unknown format {ext!r}; known: {', '.join(FILE_BUILDERS)}")
            check_data_file(path)
            check_json_file(path)
            # a local file has one split, "train"
            return datasets.load_dataset(FILE_BUILDERS[ext], data_files=path, split="train")
        return datasets.load_dataset(path, subset, split=split)
    except TaskError:
        raise
    except Exception as e:  # datasets raises many types (ConnectionError, FileNotFoundError, ValueError ...)
        if is_file:
            raise TaskError(f"could not read data file {path!r}: {type(e).__name__}: {e}") from e
        offline = " (HF_HUB_OFFLINE is set: only cached datasets load)" if os.environ.get("HF_HUB_OFFLINE") else ""
        raise TaskError(f"could not load dataset {path!r} split {split!r}{offline}: {type(e).__name__}: {e}") from e


def _rows(ds: Any, s: Mapping[str, Any], source: str) -> list[dict[str, Any]]:
    cols = list(ds.column_names)
    for key in ("prompt_column", "answer_column", "image_column"):
        if key == "image_column" and s[key] is None:
            continue
        if s[key] not in cols:
            raise TaskError(f"dataset {s['path']!r} has no column {s[key]!r} ({key}); columns: {', '.join(cols)}")
    pattern = re.compile(s["answer_pattern"], re.MULTILINE) if s["answer_pattern"] else None
    out, missed = [], []
    images = ds[s["image_column"]] if s["image_column"] else [None] * len(ds)
    for i, (q, a, im) in enumerate(zip(ds[s["prompt_column"]], ds[s["answer_column"]], images)):
        if q is None or a is None:
            continue
        for key, value in (("prompt_column", q), ("answer_column", a)):
            if isinstance(value, (list, dict)):  # str() would make "['1', '2']" the gold answer
                raise TaskError(
                    f"dataset {s['path']!r}: column {s[key]!r} ({key}) holds a {type(value).__name__} "
                    f"in row {i} ({str(value)[:60]}); one string or number per row is needed (pick one "
                    "element into a column of its own)"
                )
        a = str(a)
        if pattern is not None:
            m = pattern.search(a)
            if m is None:
                missed.append((i, a))
            a = (m.group(1) if m.groups() else m.group(0)).strip() if m else a
        row = {"question": _without_image_tags(str(q)) if s["image_column"] else str(q), "answer": a, "source": source}
        if s["image_column"]:  # one image or a list of them per row (PIL, or {"bytes": ...}): zoo.core.media
            row["images"] = [] if im is None else list(im) if isinstance(im, (list, tuple)) else [im]
        out.append(row)
    if missed:
        _pattern_misses(s, missed, len(out))
    return out


def _without_image_tags(question: str) -> str:
    """The question without `<image>` tags (geometry3k's and verl's convention for where the picture
    goes): zoo places the images itself, before the text of the first user message (TRL's convention,
    `zoo.backends.generate.images.with_image_parts`)."""
    return question.replace("<image>", "").strip()


def _pattern_misses(s: Mapping[str, Any], missed: list[tuple[int, str]], rows: int) -> None:
    """`answer_pattern` found nothing in `missed` [(row, answer)] of `rows` answers, which then stay whole
    (the gold answer would be a worked solution no completion equals). Raises TaskError when it matched
    no answer at all (a wrong pattern); logs a warning naming the count and the first such row else."""
    i, a = missed[0]
    example = f"in {s['path']!r} (e.g. row {i}: {a[:60]!r})"
    if len(missed) == rows:
        raise TaskError(
            f"answer_pattern {s['answer_pattern']!r} matches none of the {rows} answers {example}; fix the "
            "pattern (its first group is kept) or leave it out to use the answers whole"
        )
    log.warning(
        "answer_pattern %r does not match %d of %d answers %s: those answers are kept whole",
        s["answer_pattern"],
        len(missed),
        rows,
        example,
    )


def no_training_rows(
    name: str,
    path: str,
    pool: list[dict[str, Any]],
    eval_rows: list[dict[str, Any]],
    fewshot: list[dict[str, Any]],
    separate_eval: bool,
) -> str:
    """Why a task has no training rows: no usable rows at all, or every question is also an eval or
    few-shot question (those are kept out of training; repeated questions count once)."""
    if not pool:
        return (
            f"{name} task {path!r}: no training rows: no row has both a question and an answer "
            "(rows with a null in either are skipped)"
        )
    distinct = len(keys_of(pool))
    repeats = (
        f"its {len(pool)} rows hold {distinct} distinct question{'s' if distinct != 1 else ''} (repeats count once)"
        if distinct < len(pool)
        else f"its {len(pool)} rows"
    )
    taken = [f"{len(eval_rows)} eval" if eval_rows else "", f"{len(fewshot)} few-shot" if fewshot else ""]
    by = " and ".join(t for t in taken if t) or "no"
    fix = (
        "give rows with other questions, or lower fewshot"
        if separate_eval
        else "give rows with other questions, lower eval_size or fewshot, or hold eval rows out in eval_split"
    )
    return (
        f"{name} task {path!r}: no training rows left: {repeats}, and the {by} question(s) are kept out of "
        f"training (a question is never both trained on and evaluated); {fix}"
    )


def _shuffled(rows: list[dict[str, Any]], seed: int) -> Iterator[dict[str, Any]]:
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    return (dict(rows[i]) for i in order)


def load(spec: Mapping[str, Any]) -> Task:
    """Load a question/answer task (see the module docstring). Raises TaskError for a bad spec,
    a file or dataset that cannot be loaded, or a missing column (naming the columns present)."""
    name = str(spec.get("name", "hf"))
    check_keys(spec, DEFAULTS, f"{name} task")
    s = {**DEFAULTS, **spec, "name": name}
    if not s["path"]:
        raise TaskError(f"{name} task needs 'path' (a Hub dataset id or a local json/jsonl/parquet/csv file)")
    check_int(s, "size", minimum=1, allow_none=True)
    check_int(s, "eval_size", minimum=0, allow_none=True)
    check_int(s, "seed", minimum=0)
    check_int(s, "eval_seed", minimum=0, allow_none=True)
    check_fewshot(s["fewshot"])
    if s["eval_size"] is None and not s["eval_split"]:
        raise TaskError("eval_size: null (all rows) needs an 'eval_split'; otherwise give a count")

    path, seed = str(s["path"]), s["seed"]
    source = f"hf:{path}"
    pool = _rows(_load_split(path, s["subset"], s["split"], name == "jsonl"), s, source)
    eval_seed = s["eval_seed"] if s["eval_seed"] is not None else derive_seed(seed, "eval")

    fewshot = given_fewshot(s["fewshot"])
    if isinstance(s["fewshot"], int) and s["fewshot"] > 0:
        drawn = draw(_shuffled(pool, derive_seed(seed, "fewshot")), s["fewshot"], exclude=set(), distinct=True)
        fewshot = [{"question": r["question"], "answer": r["answer"]} for r in drawn]
    shot_keys = keys_of(fewshot)
    eval_pool = pool
    if s["eval_split"] and os.path.isfile(path):
        eval_path = str(s["eval_split"])
        if not os.path.isfile(eval_path):
            raise TaskError(f"eval_split of a local-file task must be a file path; no file {eval_path!r}")
        eval_pool = _rows(_load_split(eval_path, None, "train", True), {**s, "path": eval_path}, source)
    elif s["eval_split"]:
        eval_pool = _rows(_load_split(path, s["subset"], s["eval_split"], False), s, source)
    eval_rows = draw(_shuffled(eval_pool, eval_seed), s["eval_size"], exclude=shot_keys, distinct=True)
    train_rows = draw(
        _shuffled(pool, derive_seed(seed, "train")), s["size"], exclude=shot_keys | keys_of(eval_rows), distinct=False
    )
    if not train_rows:
        raise TaskError(no_training_rows(name, path, pool, eval_rows, fewshot, separate_eval=bool(s["eval_split"])))
    for split, rows, want in (("eval", eval_rows, s["eval_size"]), ("train", train_rows, s["size"])):
        if want is not None and len(rows) < want:
            log.warning("%s task %r: only %d %s rows of %d requested", name, path, len(rows), split, want)
    return Task(
        name=name,
        train=finish_rows(train_rows, fewshot, s, "train"),
        eval=finish_rows(eval_rows, fewshot, s, "eval"),
        spec=s,
        fewshot=fewshot,
    )
