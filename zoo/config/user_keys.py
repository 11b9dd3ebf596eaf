"""Errors about a run's variant, told in the user's terms: the run file and the key the user wrote first
(`run.yaml: set.kl.beta = -1: must be >= 0`), the registry file the value was applied to after.

A run changes its variant through `set:` (dotted slot overrides: `kl.beta`, `clip.eps_high`,
`loss.entropy_bonus.coef`) and through the budget (`budget.group_size`, `budget.updates`,
`budget.critic_warmup` replace the variant's). The variant's own checks and schema name the variant
field (`key 'slots.kl.beta'`, `group_size 1 < 2 ...`) in the registry file, a file the user never
wrote. `user_key_first` finds which of the user's keys an error is about and leads with them.

The run file is the RunConfig's `source` (set by `zoo.study.run_file.load_run_config` and `zoo validate` for a
run file; None for a study's arms, whose messages name the arm and its ablation instead).
"""

from __future__ import annotations

import re
from typing import Any

BUDGET_WINS = ("group_size", "updates", "critic_warmup")  # variant fields the run's budget replaces when set
_KEY = re.compile(r"key '([^']+)'")
_DOTTED = re.compile(r"(?<![\w/.-])([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+)(?![\w/-])")
_TOP = re.compile(r"\b(" + "|".join(BUDGET_WINS) + r")\b")
_LINE = re.compile(r"^(?P<file>\S+?\.ya?ml)(?: \(overrides\))?: (?:key '(?P<key>[^']+)': )?(?P<reason>.*)$")
_PYDANTIC = (
    (r"^Input should be greater than or equal to (.+)$", r"must be >= \1"),
    (r"^Input should be greater than (.+)$", r"must be > \1"),
    (r"^Input should be less than or equal to (.+)$", r"must be <= \1"),
    (r"^Input should be less than (.+)$", r"must be < \1"),
)


def source_of(cfg: Any) -> str | None:
    """The run file a RunConfig was read from, or None (built in code, or a study's arm)."""
    return getattr(cfg, "_source", None)


def _slot_path(key: str) -> str:
    """A dotted override key as the variant path it sets: `kl.beta` -> `slots.kl.beta`, `group_size` stays."""
    from zoo.config.variant import Slots

    key = str(key)
    head = key.removeprefix("slots.").split(".")[0]
    return "slots." + key.removeprefix("slots.") if head in Slots.model_fields else key


def user_entries(cfg: Any) -> list[tuple[str, str, Any]]:
    """(variant path, the user's key, its value) for every variant value the run sets: each `set:` key
    (`slots.kl.beta`, `set.kl.beta`, -1) and each budget field that replaces the variant's."""
    out = [(_slot_path(k), f"set.{k}", v) for k, v in cfg.set.items()]
    for f in BUDGET_WINS:
        value = getattr(cfg.budget, f)
        if value is not None:
            out.append((f, f"budget.{f}", value.model_dump() if hasattr(value, "model_dump") else value))
    return out


def _mentioned(line: str) -> list[str]:
    """The variant paths a message names: `key '...'`, dotted paths, the budget's fields by name and a
    slot's component (`advantage 'gae' reads ...`); a list of what is allowed (`allowed: a, b`) is no
    mention."""
    from zoo.config.variant import Slots

    line = line.split("allowed: ")[0]
    slots = re.findall(r"(?<![\w.])(" + "|".join(Slots.model_fields) + r") '", line)
    found = _KEY.findall(line) + _DOTTED.findall(line) + _TOP.findall(line) + slots
    return [_slot_path(p) for p in found]


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def show_value(v: Any) -> str:
    """A value as a YAML flow-style line: `{a: 1}`, `[a, b]`, `true`."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {show_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(show_value(x) for x in v) + "]"
    return str(v).lower() if isinstance(v, bool) else str(v)


def shown(value: Any) -> str:
    """A file's value in an error, with what it is: `the number 3`, `the string 'grpo'`, `null`,
    `the boolean true`, `a list [a, b]`, `a mapping {a: 1}`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}" if value else "an empty string"
    kind = "a list" if isinstance(value, (list, tuple)) else "a mapping" if isinstance(value, dict) else "a value"
    return f"{kind} {show_value(value)}"


def plain_reason(reason: str) -> str:
    """pydantic's bound messages in short: `Input should be greater than or equal to 1` -> `must be >= 1`."""
    for pattern, repl in _PYDANTIC:
        reason = re.sub(pattern, repl, reason)
    return reason


def _one_line(line: str, entries: list[tuple[str, str, Any]], source: str) -> str | None:
    paths = _mentioned(line)
    hits = [(k, v) for path, k, v in entries if any(_related(path, p) for p in paths)]
    if not hits:
        return None
    keys = ", ".join(f"{k} = {show_value(v)}" for k, v in dict(hits).items())
    m = _LINE.match(line)
    if m is None:
        return f"{source}: {keys}: {line}"
    where = m["file"] + (f", key '{m['key']}'" if m["key"] else "")
    return f"{source}: {keys}: {plain_reason(m['reason'])} (applied to {where})"


def user_key_first(msg: str, cfg: Any, built_with_set: bool = False) -> str:
    """`msg` (one or more lines from the variant's schema or checks) with each line about a value the
    run file sets rewritten as `<run file>: <user key> = <value>: <why> (applied to <registry file>, key
    '<variant key>')`. A line about none of them is kept, prefixed with the run file and its `set:` when
    `built_with_set` (the error came from building the variant with the overrides). Unchanged when
    the config has no `source_of` file or the message already leads with it."""
    source = source_of(cfg)
    if not source or msg.startswith(f"{source}: "):
        return msg
    entries = user_entries(cfg)
    out = []
    for line in msg.splitlines():
        named = _one_line(line, entries, source) if entries else None
        if named is None and cfg.set and built_with_set:
            sets = ", ".join(f"{k}={show_value(v)}" for k, v in cfg.set.items())
            named = f"{source}: set: {sets}: {line}"
        out.append(named or line)
    return "\n".join(dict.fromkeys(out))
