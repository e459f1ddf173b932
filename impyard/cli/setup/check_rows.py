"""``impyard check box``'s rows, printed one by one as each check finishes.

The table cannot wait for its widest cell, so the check column is as wide as the longest
name the runtime's rows have (``row_names``, known before a box runs). Piped, a row is one
line, never cut; on a terminal the name and the detail fold within their columns to the
terminal's width. What a box printed is shown escaped, never obeyed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from impyard.box.checks.checkrow import Check
from impyard.cli.shared._wrap import terminal_width, wrap_words
from impyard.common.textsafe import visible

GAP = 2  # spaces between columns, as every table has
RESULT_WIDTH = len("result")
#: Columns the detail keeps on a narrow terminal: the name folds before it gets fewer.
MIN_DETAIL = 32
MIN_NAME = 16


def result_of(check: Check) -> str:
    if check.name.endswith("(info)"):
        return "info"
    return "ok" if check.ok else "FAIL"


class RowPrinter:
    def __init__(self, title: str, names: Sequence[str], out: TextIO | None = None) -> None:
        self._out = out if out is not None else sys.stdout
        self._title = title
        self._name_width = max(len("check"), *(len(name) for name in names))
        self._width: int | None = None
        if self._out.isatty():
            self._width = terminal_width()
            room = self._width - 2 * GAP - RESULT_WIDTH - MIN_DETAIL
            self._name_width = max(MIN_NAME, min(self._name_width, room))
        self._started = False

    def put(self, check: Check) -> None:
        """Print ``check``'s row now (after the title and header, before the first row)."""
        if not self._started:
            self._started = True
            self._write([self._title], ["check", "result", "detail"])
        self._write([], [visible(check.name), result_of(check), visible(check.detail)])

    def _write(self, before: list[str], cells: list[str]) -> None:
        name, result, detail = cells
        lines = list(before)
        if self._width is None:
            lines.append(self._line(name, result, detail))
        else:
            detail_width = max(1, self._width - self._name_width - 2 * GAP - RESULT_WIDTH)
            names = _fold(name, self._name_width)
            details = _fold(detail, detail_width)
            for i in range(max(len(names), len(details))):
                lines.append(
                    self._line(
                        names[i] if i < len(names) else "",
                        result if i == 0 else "",
                        details[i] if i < len(details) else "",
                    )
                )
        self._out.write("".join(line + "\n" for line in lines))
        self._out.flush()

    def _line(self, name: str, result: str, detail: str) -> str:
        gap = " " * GAP
        return f"{name:<{self._name_width}}{gap}{result:<{RESULT_WIDTH}}{gap}{detail}".rstrip()


def _fold(text: str, width: int) -> list[str]:
    # As every table folds: between words, a path between its parts, never mid-word.
    return wrap_words(text, width)
