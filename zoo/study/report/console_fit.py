"""Fitting the report's tables to a console without cutting a cell: a log file or pipe gets a width
the table never exceeds, and a narrow terminal gets the side-by-side table in column groups (the arm
column repeated in each) that fit, their cells folded between words rather than cut with "…" (rich
shrinks or drops columns of a table wider than the console)."""

from __future__ import annotations

from typing import Any

PIPE_WIDTH = 1000  # a log file or pipe: wide enough for any table (a rich table shrinks to its content)
COLUMN_GAP = 3  # a column's padding and separator in a box.SIMPLE_HEAD table (1 + 1 + 1)


def wide_if_piped(console: Any) -> Any:
    """`console`, or for one that is not a terminal (a log file, a pipe) a Console on the same file
    PIPE_WIDTH columns wide: a table is never squeezed, so never cut, to fit 80 columns."""
    from rich.console import Console

    console = console or Console()
    return console if console.is_terminal else Console(file=console.file, width=max(console.width, PIPE_WIDTH))


def longest_word(cells: list[str]) -> int:
    """The longest whitespace-free piece of the cells: a column this wide folds between words, so a
    number ("0.376", "[-0.200,") is never split mid-digit when the console has room for it."""
    return max((len(w) for c in cells for w in str(c).split()), default=1)


def column_groups(widths: list[int], room: int, keep: int = 1) -> list[list[int]]:
    """Columns keep.. (by index) in order, grouped so that the first `keep` columns (the arm, repeated
    in each group) and each group fit in `room` characters, a column taking widths[i] + COLUMN_GAP; a
    column wider than the room alone still gets a group of its own (its cells then fold).
    [[keep, ..., n-1]] when all fit.

    e.g. widths [4, 5, 5, 5], room 20: 4+3 + 5+3 = 15, + 8 = 23 > 20 -> [[1], [2], [3]];
    room 23 -> [[1, 2], [3]]."""
    groups: list[list[int]] = []
    first = sum(w + COLUMN_GAP for w in widths[:keep])
    used, cur = first, []
    for i, w in enumerate(widths[keep:], keep):
        if cur and used + w + COLUMN_GAP > room:
            groups.append(cur)
            used, cur = first, []
        cur.append(i)
        used += w + COLUMN_GAP
    return groups + [cur] if cur else groups


def print_fitted(
    console: Any, title: str, header: list[str], rows: list[list[str]], keep: int = 1, natural: list[int] | None = None
) -> None:
    """Print a rich table (box.SIMPLE_HEAD) that never cuts a cell: in column groups that fit the
    console (`column_groups`), the first `keep` columns (bold cyan, never wrapped) repeated in each,
    the other cells folded between words (`longest_word`) where a group is still too wide.
    natural: the width each column asks for (default: its longest cell or header)."""
    from rich import box
    from rich.table import Table

    if not header:
        return
    natural = natural or [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    for n, group in enumerate(column_groups(natural, console.width, keep)):
        t = Table(title=title if n == 0 else None, box=box.SIMPLE_HEAD, pad_edge=False)
        for i in range(keep):
            t.add_column(header[i], style="bold cyan", no_wrap=True, min_width=natural[i])
        for i in group:
            t.add_column(header[i], overflow="fold", min_width=longest_word([header[i]] + [r[i] for r in rows]))
        for r in rows:
            t.add_row(*r[:keep], *(r[i] for i in group))
        console.print(t)


def fit_widths(full: list[int], least: list[int], room: int) -> list[int] | None:
    """Column widths for one table in `room` characters: `full` (each column's widest cell) where they
    fit, else each column at least `least` (its longest word), the spare room given first to the
    columns that lack least (so short cells stay on one line and long ones fold); None where even
    `least` does not fit.

    e.g. full [4, 10, 6], least [4, 5, 3], room 25: 25 - 9 = 16 for the cells; 12 at least, the 6 gets
    its 3, the 10 the last 1 -> [4, 6, 6]."""
    cells = room - COLUMN_GAP * len(full)
    if sum(full) <= cells:
        return list(full)
    if sum(least) > cells:
        return None
    widths, spare = list(least), cells - sum(least)
    for i in sorted(range(len(full)), key=lambda j: full[j] - least[j]):
        give = min(spare, full[i] - widths[i])
        widths[i] += give
        spare -= give
    return widths
