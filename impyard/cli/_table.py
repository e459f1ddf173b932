"""Every table the CLI prints: fitted to the terminal on a TTY, plain aligned text when piped.

On a terminal the table takes the terminal's width (80 columns included): columns marked
``optional`` go first when it does not fit, then wrappable cells fold; the value column of
a table is never dropped. Piped (a script, a log, ``| less``), rows are plain text aligned
in columns and never cut, however long a value is. Colour marks states on a terminal only,
and not at all when ``NO_COLOR`` is set (rich reads it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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
}

GAP = 2  # spaces between columns


@dataclass(frozen=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"
    wrap: bool = False  # may fold onto more lines on a narrow terminal
    optional: bool = False  # dropped first when the terminal is too narrow
    states: bool = False  # its cells are states, coloured on a terminal
    min_width: int | None = None  # the value column keeps room on a narrow terminal


def print_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], *, title: str | None = None
) -> None:
    if sys.stdout.isatty():
        _print_terminal(columns, rows, title)
    else:
        for line in plain_lines(columns, rows, title=title):
            sys.stdout.write(line + "\n")


def plain_lines(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], *, title: str | None = None
) -> list[str]:
    """The table as aligned text: each column as wide as its widest cell, the last unpadded."""
    table = [[c.header for c in columns], *([_one_line(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    lines = [title] if title else []
    for row in table:
        cells = [
            cell.rjust(widths[i]) if columns[i].justify == "right" else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append((" " * GAP).join(cells).rstrip())
    return lines


def _one_line(cell: str) -> str:
    return " ".join(cell.splitlines())


def _print_terminal(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], title: str | None
) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    keep = _fitting(columns, rows, console.width)
    if title:
        console.print(Text(title, overflow="fold"))
    table = Table(box=None, pad_edge=False, padding=(0, GAP // 2))
    for i in keep:
        c = columns[i]
        table.add_column(
            c.header,
            justify=c.justify,
            no_wrap=not c.wrap,
            overflow="fold",
            min_width=c.min_width,
            header_style="bold",
        )
    for row in rows:
        cells = []
        for i in keep:
            cell = _one_line(row[i])
            style = STATE_STYLES.get(cell, "") if columns[i].states else ""
            cells.append(Text(cell, style=style))
        table.add_row(*cells)
    console.print(table)


def _fitting(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """The columns to show: all, less optional ones (last first) while the table is wider
    than ``width``."""
    natural = [
        max([len(c.header), *(len(_one_line(row[i])) for row in rows)])
        for i, c in enumerate(columns)
    ]
    keep = list(range(len(columns)))
    optional = [i for i, c in enumerate(columns) if c.optional]
    while optional and sum(natural[i] for i in keep) + GAP * (len(keep) - 1) > width:
        keep.remove(optional.pop())
    return keep
