"""Resolving reward specs and scoring completions into the objective matrix [N, K].

    fns = [resolve_reward("correctness"), resolve_reward({"name": "format"}),
           resolve_reward("mylab.rewards:politeness")]
    scores = compute_rewards(fns, completions, rows)   # scores.objectives [N, K], scores.n_failed [K]
    acc = accuracy(scores.objectives[:, 0])

A reward that raises or returns None for a row is NaN there (docs/algorithms.md, "Our
conventions"); the run never stops for it.
"""
from __future__ import annotations

import importlib
import inspect
import logging
import math
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import torch

from zoo.registry import Component, ComponentError, build, get, parse_spec, register

log = logging.getLogger(__name__)


class RewardScores(NamedTuple):
    """objectives: float32 [N, K], NaN where a reward failed. n_failed: K ints, NaN count per column."""

    objectives: torch.Tensor
    n_failed: list[int]


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "name", None) or getattr(fn, "__qualname__", None) or repr(fn)


def _as_float(v: Any) -> float:
    """A finite float, or NaN for None, a non-number, NaN or +-inf."""
    if v is None or isinstance(v, (str, bytes)):
        return math.nan
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


def _column(fn: Callable[..., Any], completions: list[str], rows: list[dict]) -> list[float]:
    """One reward's N values. A raising batch call is retried row by row, so only the rows that
    raise become NaN; the first exception is logged once (logging.warning) per call."""
    n = len(completions)
    try:
        values = list(fn(completions, rows))
        if len(values) != n:
            raise ValueError(f"returned {len(values)} values for {n} completions")
        return [_as_float(v) for v in values]
    except Exception as batch_error:
        out, failures = [], 0
        for c, r in zip(completions, rows):
            try:
                vals = list(fn([c], [r]))
                out.append(_as_float(vals[0]) if len(vals) == 1 else math.nan)
            except Exception:
                out.append(math.nan)
                failures += 1
        log.warning(
            "reward %s raised %s: %s (%d of %d rows NaN after a row-by-row retry)",
            _name(fn), type(batch_error).__name__, batch_error, failures, n,
        )
        return out


def compute_rewards(
    fns: Sequence[Callable[..., Any]], completions: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> RewardScores:
    """Call each reward function on the batch; returns `RewardScores(objectives [N, K] float32,
    n_failed [K])` (unpacks as a tuple).

    fns: K callables `fn(completions, rows) -> N values` (built `Component`s or plain functions).
    An entry that is None, not a number, NaN/inf, or from a call that raised, is NaN and counted;
    a function that raises for the whole batch gives an all-NaN column. Never raises for a reward's
    failure. Raises ValueError when completions and rows differ in length.
    """
    completions, rows = list(completions), list(rows)
    if len(completions) != len(rows):
        raise ValueError(f"{len(completions)} completions but {len(rows)} rows")
    cols = [_column(fn, completions, rows) for fn in fns]
    if cols:
        objectives = torch.tensor(cols, dtype=torch.float32).T.contiguous()
    else:
        objectives = torch.zeros(len(completions), 0)
    n_failed = [int(torch.isnan(objectives[:, k]).sum()) for k in range(objectives.shape[1])]
    return RewardScores(objectives, n_failed)


def correct(scores: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Bool tensor: score == 1.0 (reasoning_gym partial credit is not correct; NaN is not correct)."""
    return torch.as_tensor(scores, dtype=torch.float32) == 1.0


def accuracy(scores: torch.Tensor | Sequence[float]) -> float:
    """Fraction of correctness scores equal to 1.0 among those that are not NaN (NaN rows are left
    out, as everywhere else); NaN when no score is available."""
    s = torch.as_tensor(scores, dtype=torch.float32)
    ok = ~torch.isnan(s)
    return float((s[ok] == 1.0).float().mean()) if ok.any() else math.nan


def _import_callable(path: str) -> Callable[..., Any]:
    """`pkg.mod:attr.sub` or `pkg.mod.attr` -> the object. Raises ComponentError naming the path."""
    if ":" in path:
        mod_name, attr = path.split(":", 1)
    else:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise ComponentError(f"reward {path!r}: a dotted path needs a module and a function ('pkg.mod:fn')")
    try:
        obj: Any = importlib.import_module(mod_name)
    except ImportError as e:
        raise ComponentError(f"reward {path!r}: module {mod_name!r} could not be imported: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ComponentError(f"reward {path!r}: {mod_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ComponentError(f"reward {path!r} is not callable (got {type(obj).__name__})")
    try:
        inspect.signature(obj).bind(["text"], [{}])
    except TypeError as e:
        raise ComponentError(f"reward {path!r} must accept (completions, rows): {e}") from e
    except ValueError:
        pass  # no signature available (some builtins): trust it
    return obj


def resolve_reward(spec: str | Mapping[str, Any]) -> Component:
    """A reward `Component` from a registry name ("correctness"), a mapping ({name: format, pattern:
    ...}) or a user function by dotted path ("mylab.rewards:fn" or "mylab.rewards.fn", with its
    keyword-only parameters in the mapping form). A dotted-path function is registered under its
    path. Raises ComponentError for an unknown name (with close matches), a bad parameter, or a path
    that cannot be imported or is not callable with (completions, rows)."""
    name, params = parse_spec(spec)
    try:
        get("reward", name)
    except ComponentError:
        if "." not in name and ":" not in name:
            raise
        register("reward", name)(_import_callable(name))
    return build("reward", {"name": name, **params})


def resolve_rewards(specs: Sequence[str | Mapping[str, Any]]) -> list[tuple[Component, float]]:
    """Each spec resolved with its weight: a mapping's `weight` key (default 1.0) is taken out
    before resolving. Returns [(component, weight)]. Raises ValueError for an empty list, a weight
    that is not a finite number, or two rewards with the same name (their `reward/<name>` metrics
    would collide and `reward/total` would be wrong)."""
    if len(specs) == 0:
        raise ValueError("rewards: at least one reward is needed, e.g. [correctness]")
    out = []
    for spec in specs:
        weight = 1.0
        if isinstance(spec, Mapping) and "weight" in spec:
            spec = dict(spec)
            if isinstance(spec["weight"], bool):  # float(True) would be 1.0
                raise ValueError(f"rewards: weight must be a number, got the boolean {str(spec['weight']).lower()} "
                                 f"in {spec!r}")
            try:
                weight = float(spec.pop("weight"))
            except (TypeError, ValueError):
                raise ValueError(f"rewards: weight must be a number, got {spec!r}") from None
            if not math.isfinite(weight):
                raise ValueError(f"rewards: weight must be finite, got {weight}")
        out.append((resolve_reward(spec), weight))
    names = [c.name for c, _ in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"rewards: {', '.join(map(repr, dup))} listed more than once; combine them into one "
                         "entry with a weight (each reward's metrics are logged under its name)")
    return out
