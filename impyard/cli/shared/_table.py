"""Every table the CLI prints: fitted to the terminal on a TTY, plain aligned text when piped.

Each cell is escaped with ``visible`` (the one rule for every line the CLI prints): a cell
can hold what a box chose, and a control or bidirectional character in it is shown as its
escape, never obeyed.

On a terminal the table takes the terminal's width (80 columns included): wrappable
columns fold first, at word boundaries (``_wrap``), down to their minimum; only when that
is not enough do ``optional`` columns go, the lowest ``keep`` first, then the last listed.
Piped (a script, a log, ``| less``), a table keeps one row per line, aligned in columns
and never cut, however long a value is; a table people read (``policy show``, ``deploy``:
``wrap_piped``) folds at ``PIPED_WIDTH`` instead, keeping every column. Colour marks
states on a terminal only, and not at all when ``NO_COLOR`` is set.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from impyard.cli.shared._wrap import cells, styled_output, terminal_width, wrap_words
from impyard.common.textsafe import visible

#: Colours for run and task states and checkpoints, shown on a terminal only.
STATE_STYLES = {
    "integrated": "green",
    "done": "green",
    "current": "green",
    "running": "cyan",
    "queued": "cyan",
    "empty": "dim",
    "cancelled": "dim",
    "rejected": "red",
    "quarantined": "red",
    "failed": "red",
    "failing": "red",
    "conflict": "yellow",
    "held": "yellow",
}
#: The SGR code of each style name.
SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}

GAP = 2  # spaces between columns
#: The width a table people read folds to when piped: wide enough for ``policy show``'s
#: longest key beside a readable value, and the same in every pipe, so the text a script
#: or a diff sees does not depend on the terminal that ran it.
PIPED_WIDTH = 100
#: What a wrappable column keeps at least, unless its header or its widest cell is less.
MIN_WRAPPED = 10


@dataclass(frozen=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"
    wrap: bool = False  # may fold onto more lines when the table is too wide
    optional: bool = False  # may go on a terminal too narrow even with every fold made
    states: bool = False  # its cells are states, coloured on a terminal
    min_width: int | None = None  # the value column keeps room on a narrow terminal
    keep: int = 0  # among optional columns, the lowest goes first


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    wrap_piped: bool = False,
) -> None:
    if sys.stdout.isatty():
        lines = table_lines(
            columns, rows, title=title, width=terminal_width(), styled=styled_output()
        )
    else:
        width = PIPED_WIDTH if wrap_piped else None
        lines = table_lines(columns, rows, title=title, width=width, may_drop=False)
    for line in lines:
        sys.stdout.write(line + "\n")


def plain_lines(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], *, title: str | None = None
) -> list[str]:
    """The table as aligned text: each column as wide as its widest cell, the last unpadded."""
    return table_lines(columns, rows, title=title, width=None)


def table_lines(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    width: int | None,
    may_drop: bool = True,
    styled: bool = False,
) -> list[str]:
    """The table's lines: within ``width`` columns (None: one line per row, never cut)."""
    # A tab would jump to the terminal's next tab stop, out of its column.
    shown = [[visible(cell).replace("\t", " ") for cell in row] for row in rows]
    natural = [
        max([len(c.header), *(cells(row[i]) for row in shown)]) for i, c in enumerate(columns)
    ]
    keep = list(range(len(columns)))
    widths = natural
    lines: list[str] = []
    if title:
        lines += [visible(title)] if width is None else wrap_words(visible(title), width)
    if width is not None:
        least = [_least(c, natural[i]) for i, c in enumerate(columns)]
        if may_drop:
            keep = _kept(columns, least, width)
        widths = _fitted(columns, natural, least, keep, width)
    header = [[c.header] for c in columns]
    lines += _row_lines(columns, header, keep, widths, "bold" if styled else None)
    for row in shown:
        folded = [wrap_words(cell, widths[i]) for i, cell in enumerate(row)]
        lines += _row_lines(columns, folded, keep, widths, "" if styled else None)
    return lines


def _least(column: Column, natural: int) -> int:
    """How narrow ``column`` may become before anything is dropped."""
    if not column.wrap:
        return natural
    return min(natural, max(len(column.header), column.min_width or MIN_WRAPPED))


def _kept(columns: Sequence[Column], least: list[int], width: int) -> list[int]:
    """The columns to show: all, less optional ones while even their least widths do not
    fit ``width``."""
    keep = list(range(len(columns)))
    optional = [i for i, c in enumerate(columns) if c.optional]
    # The lowest keep goes first; among equals, the last listed.
    optional.sort(key=lambda i: (columns[i].keep, -i))
    while optional and _total(least, keep) > width:
        keep.remove(optional.pop(0))
    return keep


def _fitted(
    columns: Sequence[Column], natural: list[int], least: list[int], keep: list[int], width: int
) -> list[int]:
    """Each column's width: its widest cell, less what the table must give up to fit
    ``width``, taken from the widest wrappable column first; from any column (its header's
    width at least) only when the wrappable ones alone cannot give enough."""
    widths = list(natural)
    for floor, shrinkable in (
        (least, [i for i in keep if columns[i].wrap]),
        ([max(1, len(c.header)) for c in columns], keep),
    ):
        while _total(widths, keep) > width:
            room = [i for i in shrinkable if widths[i] > floor[i]]
            if not room:
                break
            widest = max(room, key=lambda i: widths[i] - floor[i])
            widths[widest] -= 1
    return widths


def _total(widths: list[int], keep: list[int]) -> int:
    return sum(widths[i] for i in keep) + GAP * (len(keep) - 1)


def _row_lines(
    columns: Sequence[Column],
    folded: list[list[str]],
    keep: list[int],
    widths: list[int],
    style: str | None,
) -> list[str]:
    """One row's lines, its cells side by side; ``style``: None plain, "" states coloured,
    else that style on every cell (the header's bold)."""
    height = max(len(folded[i]) for i in keep)
    lines = []
    for n in range(height):
        parts = []
        for i in keep:
            text = folded[i][n] if n < len(folded[i]) else ""
            pad = " " * (widths[i] - cells(text))
            shown = _styled(text, _style(columns[i], folded[i], style))
            parts.append(pad + shown if columns[i].justify == "right" else shown + pad)
        lines.append((" " * GAP).join(parts).rstrip())
    return lines


def _style(column: Column, cell: list[str], style: str | None) -> str | None:
    if style is None:
        return None
    if style:
        return style
    return STATE_STYLES.get(" ".join(cell)) if column.states else None


def _styled(text: str, style: str | None) -> str:
    code = SGR.get(style or "")
    return f"\x1b[{code}m{text}\x1b[0m" if code and text else text


def print_fields(fields: Sequence[tuple[str, str]]) -> None:
    """``label  value`` lines, the labels aligned (``runs show``): on a terminal a long
    value folds between words under itself; piped, each field stays one line."""
    label_width = max(len(label) for label, _ in fields)
    room = terminal_width() - label_width - GAP if sys.stdout.isatty() else None
    for label, value in fields:
        text = visible(value)
        first, *rest = [text] if room is None else wrap_words(text, max(MIN_WRAPPED, room))
        sys.stdout.write(f"{label:<{label_width}}{' ' * GAP}{first}".rstrip() + "\n")
        for line in rest:
            sys.stdout.write(" " * (label_width + GAP) + line + "\n")
