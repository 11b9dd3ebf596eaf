"""Dotted overrides, the one implementation used by variant, run and study files.

`--set clip.eps_high=0.32`, a run file's `set:`, a study's `sweep:` keys: each key `a.b.c` sets
`tree["a"]["b"]["c"] = value` in a nested dict. Where the key goes first (the variant's `slots`,
the run file's `set`, a study's `sweep`) is the caller's routing (`zoo.config.variant.apply_overrides`,
`zoo.config.run.set_dotted`, `zoo.study.experiment`); this module does the rest the same way for all three:

- a node given by name alone becomes a spec: `clip: ppo` + `clip.eps=0.1` -> `clip: {name: ppo, eps: 0.1}`
  (`spec_of` can map a name otherwise, as the variant does for `kl: none`);
- a missing, `null` or `true` node becomes a mapping (`tracking.wandb: true` + `tracking.wandb.project=x`);
- a list node is an error (set the list whole), as is any other scalar in the way, except in a
  variant's list slots (`by_name`): `loss.entropy_bonus.coef=0.01` sets `coef` of the list's item
  named `entropy_bonus`, appending `{name: entropy_bonus}` when the list has none;
- `did_you_mean` gives the close match for an unknown key.
"""

from __future__ import annotations

import copy
import difflib
from typing import Any, Callable, Iterable, Mapping, Sequence

Route = Callable[[str], tuple[Sequence[str], Sequence[str]]]
SpecOf = Callable[[str, str], dict[str, Any]]


class OverrideError(ValueError):
    """An override that cannot be applied; the message names the file (`where`) and the key."""


def name_spec(head: str, name: str) -> dict[str, Any]:
    """A node given by name alone, as a spec: `ppo` -> `{"name": "ppo"}` (head is the node's key)."""
    return {"name": name}


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`" (did you mean 'clip'?)"` for the closest of `known` to `word`, else ""."""
    close = difflib.get_close_matches(str(word), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def set_path(
    tree: dict[str, Any],
    parts: Sequence[str],
    value: Any,
    where: str,
    key: str,
    spec_of: SpecOf = name_spec,
    list_name: str = "list",
    by_name: bool = False,
) -> None:
    """In place: `tree[parts[0]]...[parts[-1]] = deepcopy(value)`, turning the nodes on the way into
    mappings as the module doc says.

    Raises OverrideError `"{where}: key {key!r}: ..."` when a node on the way is a list (`list_name`
    says what a list is called there, e.g. "list slot") or another scalar."""
    head, rest = parts[0], list(parts[1:])
    if not rest:
        tree[head] = copy.deepcopy(value)
        return
    cur = tree.get(head)
    if isinstance(cur, str):
        cur = spec_of(head, cur)
    elif cur is None or cur is True:
        cur = {}
    elif isinstance(cur, list) and by_name and len(rest) > 1:
        tree[head] = _set_in_named_list(cur, rest[0], rest[1:], value, where, key)
        return
    elif isinstance(cur, list):
        hint = f", or one item's parameter: {head}.<name>.<param>" if by_name else ""
        raise OverrideError(f"{where}: key {key!r}: {head} is a {list_name}; set it whole, e.g. {head}: [...]{hint}")
    elif not isinstance(cur, dict):
        raise OverrideError(f"{where}: key {key!r}: {head} is {cur!r}, not a mapping; set {head} whole")
    tree[head] = cur
    set_path(cur, rest, value, where, key, spec_of, list_name)


def _set_in_named_list(items: list[Any], name: str, rest: Sequence[str], value: Any, where: str, key: str) -> list[Any]:
    """A copy of a list of component specs with `rest = value` set in the item called `name`
    (appended as `{name: ...}` when absent). Raises OverrideError when two items have that name."""
    items = list(items)
    hits = [i for i, x in enumerate(items) if (x if isinstance(x, str) else (x or {}).get("name")) == name]
    if len(hits) > 1:
        raise OverrideError(f"{where}: key {key!r}: the list holds {name!r} {len(hits)} times; set the list whole")
    if not hits:
        items.append({"name": name})
        hits = [len(items) - 1]
    item = items[hits[0]]
    item = {"name": item} if isinstance(item, str) else dict(item)
    set_path(item, rest, value, where, key)
    items[hits[0]] = item
    return items


def apply_dotted(
    data: Mapping[str, Any],
    sets: Mapping[str, Any],
    where: str,
    route: Route,
    spec_of: SpecOf = name_spec,
    list_name: str = "list",
    by_name: bool = False,
) -> dict[str, Any]:
    """A deep copy of `data` with every `key: value` of `sets` applied.

    `route(key)` -> (container, parts): the path of the mapping the key goes into (created when
    missing) and the key's parts inside it; it raises the caller's error for a key that goes
    nowhere. A container that holds dotted keys itself (a run file's `set`, a study's `sweep`) is
    addressed with `parts = ["rest.of.key"]`. Raises OverrideError as `set_path` does."""
    out = copy.deepcopy(dict(data))
    for key, value in sets.items():
        if "" in str(key).split("."):
            raise OverrideError(
                f"{where}: key {str(key)!r} has an empty name between its dots; write the full dotted key, "
                "e.g. clip.eps_high or set.clip.eps_high"
            )
        container, parts = route(str(key))
        node = out
        for c in container:
            if not isinstance(node.get(c), dict):
                node[c] = {}
            node = node[c]
        set_path(node, parts, value, where, str(key), spec_of, list_name, by_name)
    return out
