"""Resolving reward specs and scoring completions into the objective matrix [N, K].

    fns = [resolve_reward("correctness"), resolve_reward({"name": "format"}),
           resolve_reward("mylab.rewards:politeness", plugins=["mylab.rewards"])]
    scores = compute_rewards(fns, completions, rows)   # scores.objectives [N, K], scores.n_failed [K]
    acc = accuracy(scores.objectives[:, 0])

A reward that raises or returns None for a row leaves that row unscored (NaN, docs/concepts/algorithms.md,
"Our conventions"); a return value that breaks the contract (not one finite float or None per
completion) raises RewardError. A dotted-path reward must live in a module the run names in
`plugins` (docs/reference/cli.md, "Rewards and plugins").
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
import numbers
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np
import torch

from zoo.core.declarations import of as declared
from zoo.core.guards import RewardError
from zoo.core.registry import Component, ComponentError, available, build, get, import_user_module, parse_spec, register

log = logging.getLogger(__name__)


class RewardScores(NamedTuple):
    """objectives: float32 [N, K], NaN where a row could not be scored. n_failed: K ints, the
    unscored rows per column."""

    objectives: torch.Tensor
    n_failed: list[int]


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "name", None) or getattr(fn, "__qualname__", None) or repr(fn)


CONTRACT = "a reward returns one finite float per completion, or None where it cannot score one"
#: the largest |value| and |weight x value| a reward may give. The objectives and scores are float32
#: and the group statistics square deviations: with |x| <= 1e15 a group of up to 1e6 rows sums
#: (2e15)^2 x 1e6 = 4e36 < 3.4e38 (float32's max), so no statistic overflows (docs/guides/extending.md §4).
REWARD_LIMIT = 1e15


def _as_float(fn: Callable[..., Any], row: int, v: Any) -> float:
    """One returned value as a float: None -> NaN (unscored); a finite real number (Python, numpy or
    a one-element tensor) -> float. Raises RewardError for anything else (NaN/inf, bool, str, ...)."""
    if v is None:
        return math.nan
    if isinstance(v, torch.Tensor) and v.numel() == 1 and v.dim() <= 1:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise RewardError(f"reward {_name(fn)!r} returned a {type(v).__name__} ({v!r:.40}) for row {row}; {CONTRACT}")
    f = float(v)
    if math.isnan(f):
        raise RewardError(f"reward {_name(fn)!r} returned nan for row {row}; {CONTRACT} (return None, not NaN)")
    if not abs(f) <= REWARD_LIMIT:  # inf, or a value whose group statistics would overflow float32
        raise RewardError(
            f"reward {_name(fn)!r} returned {f:g} for row {row}; {CONTRACT} (finite, at most "
            f"{REWARD_LIMIT:g} in magnitude: scores are float32)"
        )
    return f


def _values(fn: Callable[..., Any], values: Any, n: int, first_row: int = 0) -> list[float]:
    """Check one call's return value: a list/tuple/1-D tensor or array of `n` values. Raises
    RewardError naming the function for None, a string, a mapping, a 2-D tensor or a wrong length."""
    if isinstance(values, (torch.Tensor, np.ndarray)):
        if values.ndim != 1:
            raise RewardError(
                f"reward {_name(fn)!r} returned a {values.ndim}-D {type(values).__name__} of shape "
                f"{tuple(values.shape)} for {n} completions; {CONTRACT} (a list or 1-D tensor of {n})"
            )
        values = values.tolist()
    if values is None or isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise RewardError(
            f"reward {_name(fn)!r} returned a {type(values).__name__} for {n} completions; {CONTRACT} (a list of {n})"
        )
    values = list(values)
    if len(values) != n:
        raise RewardError(f"reward {_name(fn)!r} returned {len(values)} values for {n} completions; {CONTRACT}")
    return [_as_float(fn, first_row + i, v) for i, v in enumerate(values)]


def _column(fn: Callable[..., Any], completions: list[str], rows: list[dict]) -> list[float]:
    """One reward's N values (NaN = unscored). The function gets copies of the rows (and of the list
    of completions), so one that mutates them leaves the batch and the logged samples as they were.
    A call that raises is retried row by row, so only the rows that raise are unscored; one warning per call says how many rows are unscored. A return
    value that breaks the contract raises RewardError (a bug in the reward, not a row's problem)."""
    n = len(completions)
    try:
        values = fn(list(completions), copy.deepcopy(rows))  # copies: a reward that edits them changes nothing
    except Exception as batch_error:
        out = []
        for i, (c, r) in enumerate(zip(completions, rows)):
            try:
                one = fn([c], [copy.deepcopy(r)])
            except Exception:
                out.append(math.nan)
                continue
            out += _values(fn, one, 1, first_row=i)
        log.warning(
            "reward %s raised %s: %s (%d of %d rows unscored after a row-by-row retry)",
            _name(fn),
            type(batch_error).__name__,
            batch_error,
            sum(math.isnan(v) for v in out),
            n,
        )
        return out
    return _values(fn, values, n)


def compute_rewards(
    fns: Sequence[Callable[..., Any]], completions: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> RewardScores:
    """Call each reward function on the batch; returns `RewardScores(objectives [N, K] float32,
    n_failed [K])` (unpacks as a tuple).

    fns: K callables `fn(completions, rows) -> N values` (built `Component`s or plain functions).
    Unscored (NaN, counted in n_failed): a row whose value is None, or whose call raised (a call
    that raises is retried row by row; a function that raises for every row gives an all-NaN
    column). An error that stops the run (RewardError, naming the function, the row and the
    value's type): a return value that is not N values (None, a dict, a string, a 2-D tensor, a
    wrong length) or a value that is not a finite real number (NaN, inf, a bool, a string).
    Raises ValueError when completions and rows differ in length. Rules: docs/guides/extending.md §4.
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


def check_weighted(objectives: torch.Tensor, names: Sequence[str], weights: Sequence[float]) -> None:
    """Raise RewardError when a weighted value |w_k x objectives[i, k]| exceeds REWARD_LIMIT (the
    float32 scores and their group statistics would overflow), naming the reward, its weight, the
    row and the value. objectives: [N, K] in the order of `names` / `weights`; NaN entries are skipped."""
    if objectives.numel() == 0:
        return
    w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
    prod = (objectives.double() * w).abs().nan_to_num(nan=0.0)  # [N, K], float64: the product itself can't overflow
    over = prod > REWARD_LIMIT
    if bool(over.any()):
        i, k = (int(x) for x in over.nonzero()[0])
        raise RewardError(
            f"reward {names[k]!r}: weight {float(w[k]):g} x value {float(objectives[i, k]):g} (row {i}) "
            f"= {float(prod[i, k]):g} exceeds {REWARD_LIMIT:g}; {CONTRACT}, and weight x value must stay "
            "within that magnitude (scores are float32): lower the weight or rescale the reward"
        )


def correct(scores: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Bool tensor: score == 1.0 (reasoning_gym partial credit is not correct; NaN is not correct)."""
    return torch.as_tensor(scores, dtype=torch.float32) == 1.0


def accuracy(scores: torch.Tensor | Sequence[float]) -> float:
    """Fraction of correctness scores equal to 1.0 among those that are not NaN (NaN rows are left
    out, as everywhere else); NaN when no score is available."""
    s = torch.as_tensor(scores, dtype=torch.float32)
    ok = ~torch.isnan(s)
    return float((s[ok] == 1.0).float().mean()) if ok.any() else math.nan


def accuracy_index(rewards: Sequence[Any]) -> int | None:
    """The column of the reward that judges correctness (registered with `accuracy=True`, e.g.
    `correctness`: score 1.0 means correct), or None. rewards: built reward components in column order."""
    return next((k for k, c in enumerate(rewards) if declared(c).accuracy), None)


def accuracy_metrics(objectives: torch.Tensor, rewards: Sequence[Any]) -> dict[str, float]:
    """The step's training accuracy, one definition with `accuracy` and the evaluation:
    {"accuracy": fraction of the scored values of the correctness-judging reward (`accuracy_index`)
    that are 1.0 (NaN rows left out, NaN when none is scored), "accuracy/unscored": how many rows
    were left out}. objectives: [N, K] in the order of `rewards`; {} without such a reward."""
    k = accuracy_index(rewards)
    if k is None:
        return {}
    col = objectives[:, k]  # [N]
    return {"accuracy": accuracy(col), "accuracy/unscored": float(torch.isnan(col.float()).sum())}


#: rewards registered here under their dotted path (not by a plugin's @register): each use is
#: checked against the caller's plugins again
_BY_PATH: set[str] = set()


def _split_path(path: str) -> tuple[str, str]:
    """`pkg.mod:attr.sub` -> ("pkg.mod", "attr.sub"); `pkg.mod.attr` -> ("pkg.mod", "attr")."""
    if ":" in path:
        mod_name, attr = path.split(":", 1)
    else:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise ComponentError(f"reward {path!r}: a dotted path needs a module and a function ('pkg.mod:fn')")
    return mod_name, attr


def _check_trusted(path: str, mod_name: str, plugins: Sequence[str]) -> None:
    """A dotted-path reward runs code from `mod_name`: allowed only when that module (or a package
    above it) is one of the run's `plugins`. Raises ComponentError saying how to allow it."""
    if any(mod_name == p or mod_name.startswith(p + ".") for p in plugins):
        return
    raise ComponentError(
        f"reward {path!r}: module {mod_name!r} is not among this run's plugins "
        f"({', '.join(plugins) or 'none'}); a reward must be registered (known: "
        f"{', '.join(n for n in available('reward') if n not in _BY_PATH)}) or defined in a module the run or "
        f"study file lists under `plugins:` (add `plugins: [{mod_name}]` if you trust its code; "
        "docs/reference/cli.md, 'Rewards and plugins')"
    )


def _import_callable(path: str, params: Mapping[str, Any]) -> Callable[..., Any]:
    """`pkg.mod:attr.sub` or `pkg.mod.attr` -> the object, checked to take (completions, rows)
    positionally (keyword-only parameters are its hyperparameters: `params` may give required ones).
    Raises ComponentError naming the path."""
    mod_name, attr = _split_path(path)
    try:
        obj: Any = import_user_module(mod_name, "module")
    except ComponentError as e:
        raise ComponentError(f"reward {path!r}: {e}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ComponentError(f"reward {path!r}: {mod_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ComponentError(f"reward {path!r} is not callable (got {type(obj).__name__})")
    try:
        sig = inspect.signature(obj)
    except ValueError:
        return obj  # no signature available (some builtins): trust it
    try:
        bound = sig.bind_partial(["text"], [{}])
    except TypeError as e:
        raise ComponentError(f"reward {path!r} must accept (completions, rows): {e}") from e
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    left = [
        n
        for n, q in sig.parameters.items()
        if n not in bound.arguments and q.kind in positional and q.default is inspect.Parameter.empty
    ]
    if left:
        raise ComponentError(
            f"reward {path!r} must accept (completions, rows): it also requires "
            f"{', '.join(map(repr, left))} positionally (hyperparameters are keyword-only: "
            f"def fn(completions, rows, *, {left[0]}): ...)"
        )
    return obj


def resolve_reward(spec: str | Mapping[str, Any], plugins: Sequence[str] = ()) -> Component:
    """A reward `Component` from a registry name ("correctness"), a mapping ({name: format, pattern:
    ...}) or a user function by dotted path ("mylab.rewards:fn" or "mylab.rewards.fn", with its
    keyword-only parameters in the mapping form). A dotted path is accepted only when its module is
    one of `plugins` (the run's or study's `plugins:`), or a submodule of one; it is registered under
    its path. Raises ComponentError for an unknown name (with close matches), a module that is not a
    plugin, a bad or missing parameter, or a path that cannot be imported or is not callable with
    (completions, rows)."""
    name, params = parse_spec(spec)
    try:
        get("reward", name)
        in_registry = True
    except ComponentError:
        if "." not in name and ":" not in name:
            raise
        in_registry = False
    if not in_registry or name in _BY_PATH:
        _check_trusted(name, _split_path(name)[0], plugins)  # before the import: importing runs the module
    if not in_registry:
        register("reward", name)(_import_callable(name, params))
        _BY_PATH.add(name)
    return build("reward", {"name": name, **params})


def resolve_rewards(
    specs: Sequence[str | Mapping[str, Any]], plugins: Sequence[str] = ()
) -> list[tuple[Component, float]]:
    """Each spec resolved with its weight (`resolve_reward(spec, plugins)`): a mapping's `weight` key
    (default 1.0) is taken out before resolving. Returns [(component, weight)]. Raises
    ComponentError (a ValueError) as `resolve_reward` does, and ValueError for an empty list, a weight
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
                raise ValueError(
                    f"rewards: weight must be a number, got the boolean {str(spec['weight']).lower()} in {spec!r}"
                )
            raw = spec.pop("weight")
            try:
                weight = float(raw)
            except (TypeError, ValueError):
                raise ValueError(
                    f"rewards: weight of {spec.get('name', spec)!r} must be a number, got {raw!r}"
                ) from None
            if not math.isfinite(weight):
                raise ValueError(f"rewards: weight must be finite, got {weight}")
            if abs(weight) > REWARD_LIMIT:
                raise ValueError(
                    f"rewards: weight {weight:g} of {spec.get('name', spec)!r} is too large: at most "
                    f"{REWARD_LIMIT:g} in magnitude (weighted scores are float32; rescale the reward "
                    "instead)"
                )
        out.append((resolve_reward(spec, plugins), weight))
    names = [c.name for c, _ in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(
            f"rewards: {', '.join(map(repr, dup))} listed more than once; combine them into one "
            "entry with a weight (each reward's metrics are logged under its name)"
        )
    return out
