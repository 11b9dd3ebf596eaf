"""reasoning_gym procedural tasks.

    {name: reasoning_gym, dataset: basic_arithmetic, config: {...}, size: 512, seed: 0,
     eval_size: 64, eval_seed: null, fewshot: 2, system: null, instruction: ..., fewshot_answer: ...}

`config` holds the dataset's own config fields (e.g. `BasicArithmeticDatasetConfig`), never `seed`
or `size` (the splits set those). Items come from `reasoning_gym.create_dataset(dataset, **config,
seed=..., size=...)`; the scorer is that dataset's `score_answer`, built once per (dataset, config).
Default reasoning_gym configs are far too hard for a 135M model: see `EASY_ARITHMETIC`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from typing import Any, Callable, Iterator, Mapping

from zoo.tasks.base import Task, TaskError, check_int, check_keys, derive_seed, draw, keys_of
from zoo.tasks.fewshot import DEFAULT_FEWSHOT_ANSWER, DEFAULT_INSTRUCTION, check_fewshot, finish_rows, given_fewshot

# Measured on SmolLM2-135M-Instruct: 2-shot boxed accuracy ~0.59, zero-shot ~0.
EASY_ARITHMETIC: dict[str, Any] = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+", "-"],
}
EASY_ARITHMETIC_TASK: dict[str, Any] = {
    "name": "reasoning_gym",
    "dataset": "basic_arithmetic",
    "config": dict(EASY_ARITHMETIC),
    "size": 512,
    "eval_size": 64,
    "fewshot": 2,
}

DEFAULTS: dict[str, Any] = {
    "name": "reasoning_gym",
    "dataset": None,
    "config": {},
    "size": 512,
    "seed": 0,
    "eval_size": 64,
    "eval_seed": None,
    "fewshot": 0,
    "system": None,
    "instruction": DEFAULT_INSTRUCTION,
    "fewshot_answer": DEFAULT_FEWSHOT_ANSWER,
}


def known_datasets() -> list[str]:
    """Sorted names in reasoning_gym's registry."""
    import reasoning_gym.factory as factory  # lazy: importing reasoning_gym takes ~1.5 s

    return sorted(factory.DATASETS)


def make_dataset(dataset: str, config: Mapping[str, Any], *, seed: int, size: int) -> Any:
    """`reasoning_gym.create_dataset(dataset, **config, seed=seed, size=size)` with clear errors.

    Raises TaskError for an unknown dataset (with close matches), an unknown config field (listing
    the fields) or a config the dataset rejects."""
    import reasoning_gym
    import reasoning_gym.factory as factory

    if dataset not in factory.DATASETS:
        known = sorted(factory.DATASETS)
        close = difflib.get_close_matches(str(dataset), known, n=5, cutoff=0.5)
        hint = f"close matches: {', '.join(close)}" if close else f"{len(known)} known, e.g. {', '.join(known[:8])}"
        raise TaskError(f"reasoning_gym has no dataset {dataset!r}; {hint}")
    config_cls = factory.DATASETS[dataset][1]
    fields = [f.name for f in dataclasses.fields(config_cls)]
    for bad in ("seed", "size"):
        if bad in config:
            raise TaskError(f"reasoning_gym config must not set {bad!r}: use the task keys 'seed'/'size'/'eval_size'")
    unknown = [k for k in config if k not in fields]
    if unknown:
        raise TaskError(
            f"reasoning_gym {dataset!r} config: unknown field {', '.join(map(repr, unknown))}; "
            f"fields of {config_cls.__name__}: {', '.join(f for f in fields if f not in ('seed', 'size'))}"
        )
    kwargs = dict(config)
    if "seed" in fields:
        kwargs["seed"] = seed
    if "size" in fields:
        kwargs["size"] = size
    try:
        return reasoning_gym.create_dataset(dataset, **kwargs)
    except (AssertionError, ValueError, TypeError) as e:
        raise TaskError(f"reasoning_gym {dataset!r} rejected config {dict(config)!r}: {e}") from e


def _config_key(config: Mapping[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=list)


@functools.lru_cache(maxsize=64)
def _scorer(dataset: str, config_json: str) -> Callable[..., float]:
    return make_dataset(dataset, json.loads(config_json), seed=0, size=1).score_answer


def scorer(dataset: str, config: Mapping[str, Any] | None = None) -> Callable[..., float]:
    """The dataset's `score_answer(answer, entry) -> float in [0, 1]`, built with `config` (some
    scorers read their config, e.g. decimal_arithmetic's precision); cached per (dataset, config)."""
    return _scorer(dataset, _config_key(dict(config or {})))


def _items(dataset: str, config: Mapping[str, Any], seed: int, n: int) -> Iterator[dict[str, Any]]:
    """Items 0, 1, 2 ... of the dataset with `seed`. The virtual size starts at max(2n, 64) and grows
    x4 when used up (most datasets make item i from Random(seed + i) whatever the size; some build
    tables per size, so a small start keeps those cheap)."""
    source = f"reasoning_gym:{dataset}"
    rg_spec = {"dataset": dataset, "config": dict(config)}
    start, size = 0, max(2 * n, 64)
    while True:
        ds = make_dataset(dataset, config, seed=seed, size=size)
        for i in range(start, len(ds)):
            entry = ds[i]
            yield {
                "question": str(entry["question"]),
                "answer": str(entry["answer"]),
                "source": source,
                "rg_entry": entry,
                "rg_spec": rg_spec,
            }
        start, size = len(ds), size * 4


def load(spec: Mapping[str, Any]) -> Task:
    """Load a reasoning_gym task (see the module docstring). Raises TaskError for a bad spec."""
    check_keys(spec, DEFAULTS, "reasoning_gym task")
    s = {**DEFAULTS, **spec}
    if not s["dataset"]:
        raise TaskError("reasoning_gym task needs 'dataset' (e.g. basic_arithmetic)")
    if not isinstance(s["config"], Mapping):
        raise TaskError(f"reasoning_gym 'config' must be a mapping, got {s['config']!r}")
    s["config"] = dict(s["config"])
    check_int(s, "size", minimum=1)
    check_int(s, "eval_size", minimum=0)
    check_int(s, "seed", minimum=0)
    check_int(s, "eval_seed", minimum=0, allow_none=True)
    check_fewshot(s["fewshot"])

    dataset, config = str(s["dataset"]), s["config"]
    make_dataset(dataset, config, seed=0, size=1)  # fail early on a bad dataset or config
    seed = s["seed"]
    eval_seed = s["eval_seed"] if s["eval_seed"] is not None else derive_seed(seed, "eval")

    def take(role_seed: int, n: int, exclude: set[str], distinct: bool, what: str) -> list[dict[str, Any]]:
        items = _items(dataset, config, role_seed, n)
        return draw(items, n, exclude=exclude, distinct=distinct, max_tries=50 * n + 10_000, what=what)

    fewshot = given_fewshot(s["fewshot"])
    if isinstance(s["fewshot"], int) and s["fewshot"] > 0:
        drawn = take(derive_seed(seed, "fewshot"), s["fewshot"], set(), True, "few-shot examples")
        fewshot = [_example(r) for r in drawn]
    shot_keys = keys_of(fewshot)
    eval_rows = take(eval_seed, s["eval_size"], shot_keys, True, "eval rows")
    train_rows = take(derive_seed(seed, "train"), s["size"], shot_keys | keys_of(eval_rows), False, "train rows")
    return Task(
        name="reasoning_gym",
        train=finish_rows(train_rows, fewshot, s, "train"),
        eval=finish_rows(eval_rows, fewshot, s, "eval"),
        spec=s,
        fewshot=fewshot,
    )


def _example(row: Mapping[str, Any]) -> dict[str, str]:
    """A few-shot example: question, answer and the entry's scalar metadata (e.g. `expression`),
    which a `fewshot_answer` template may show as worked steps."""
    meta = (row.get("rg_entry") or {}).get("metadata") or {}
    extra = {k: str(v) for k, v in meta.items() if isinstance(v, (str, int, float)) and k not in ("question", "answer")}
    return {**extra, "question": str(row["question"]), "answer": str(row["answer"])}
