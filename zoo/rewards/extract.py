"""Pulling the final answer out of a completion.

extract_boxed("so \\\\boxed{\\\\frac{1}{2}} or \\\\boxed{3}")  -> "3"      (the last complete box)
extract_answer("the sum is 12.")                        -> "12"     (fallback: last number)
extract_answer("no digits", fallback="text")            -> "no digits"
"""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)")
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")
FALLBACKS = ("last_number", "text", "none")


def _box_content(text: str, start: int) -> str | None:
    """Content of the box whose command ends at `start`: `{...}` with nested braces balanced, or
    `\\boxed 7` (one token up to whitespace or `$`). None when the braces never close."""
    i = start
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":
        if i == start:  # e.g. \boxedx: not a box command
            return None
        m = re.match(r"[^\s$]+", text[i:])
        return m.group(0).rstrip(".,;:") if m else None
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "\\" and text[j + 1 : j + 2] in ("{", "}"):
            j += 2  # an escaped brace \{ or \} does not nest
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
        j += 1
    return None


def extract_boxed(text: str) -> str | None:
    """The content of the last complete `\\boxed{...}` (or `\\fbox{...}`) in `text`, stripped of
    whitespace and enclosing `$`; nested braces are balanced (`\\boxed{\\frac{1}{2}}` ->
    `\\frac{1}{2}`). A box left open (truncated completion) is skipped. None when there is none."""
    for m in reversed(list(_BOX.finditer(text))):
        content = _box_content(text, m.end())
        if content is not None:
            return content.strip().strip("$").strip()
    return None


def last_number(text: str) -> str | None:
    """The last integer or decimal in `text` (sign kept, thousands commas removed), or None."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


def extract_answer(text: str, fallback: str = "last_number") -> str | None:
    """The answer a completion gives: the last `\\boxed{}` content; without a box, by `fallback`:
    "last_number" (the last number, else the whole stripped text), "text" (the whole stripped
    text) or "none" (None). Returns None for an empty result. Raises ValueError for another
    fallback."""
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be one of {', '.join(FALLBACKS)}, got {fallback!r}")
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed or None
    if fallback == "none":
        return None
    if fallback == "last_number":
        num = last_number(text)
        if num is not None:
            return num
    return text.strip() or None
