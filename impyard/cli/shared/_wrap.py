"""Text folded to a width at word boundaries: table cells, journal and serve lines.

A value breaks at a space; a word longer than a line breaks after punctuation that joins
words (``/``, ``-``, ``,``, ``.``, ``:``, ``;``, ``=``, ``&``, ``?``) or before an escape, so
a path or a dotted key folds between its parts and a word is never cut. Only a run of
letters and digits longer than the whole width (a hash, a token) is cut: nothing else
would fit it.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata

#: A run of spaces, or a word without them.
_WORD = re.compile(r"\s+|\S+")
#: A word's parts: each with the joining punctuation that ends it; an escape (``\x1b``,
#: ``\u202e``) begins a part, so a fold never splits one.
_PART = re.compile(r"\\?[^/,.:;=&?\-\\]*[/,.:;=&?\-]*")

#: A terminal narrower than this is taken as this wide: below it nothing can be laid out.
MIN_WIDTH = 20


def terminal_width() -> int:
    """The terminal's width (``COLUMNS`` first, as every tool reads it), 80 when unknown.

    As ``shutil.get_terminal_size`` reads it, without importing shutil (2 ms of start-up)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    stdout = sys.__stdout__
    try:
        found = os.get_terminal_size(stdout.fileno() if stdout else 1).columns
    except (ValueError, OSError):  # stdout closed, or not a terminal
        return 80
    return max(MIN_WIDTH, found) if found else 80  # 0: a terminal that never set its size


def styled_output() -> bool:
    """Whether colour and bold may be written: a terminal that is not ``dumb``, and no
    ``NO_COLOR`` (no-color.org: any non-empty value)."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def cells(text: str) -> int:
    """How many terminal columns ``text`` takes: a wide (East Asian) character two, a
    combining mark none, any other one."""
    if text.isascii():
        return len(text)
    return sum(_cells(char) for char in text)


def _cells(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def _head(text: str, room: int) -> int:
    """How many characters of ``text`` fit ``room`` columns (one at least, so a fold
    always moves on)."""
    used = 0
    for count, char in enumerate(text):
        used += _cells(char)
        if used > room:
            return max(1, count)
    return len(text)


def wrap_words(text: str, width: int, *, indent: int = 0) -> list[str]:
    """``text`` as lines of at most ``width`` columns, broken between words, and inside a
    word (after its joining punctuation) only when it is longer than a whole line. Lines
    after the first are indented by ``indent``: a hanging indent shows where one entry (a
    journal event, a serve line) ends and the next begins."""
    if cells(text) <= width:
        return [text]
    folded = _Folder(width, max(1, width - indent))
    for word in _WORD.findall(text):
        folded.add(word)
    lines = folded.done()
    pad = " " * indent
    return [lines[0], *(pad + line for line in lines[1:])]


class _Folder:
    """Lines filled greedily, word by word; ``room`` is what the current line may take."""

    def __init__(self, first: int, rest: int) -> None:
        self.lines: list[str] = []
        self.line = ""
        self.used = 0
        self.room = first
        self.rest = rest

    def add(self, word: str) -> None:
        if word.isspace():
            if self.line:
                self.append(word)
            return
        if self.used + cells(word) <= self.room:
            self.append(word)
            return
        self.newline()
        if cells(word) <= self.room:
            self.append(word)
            return
        # Longer than a line: folded between its parts.
        for part in filter(None, _PART.findall(word)):
            if self.used + cells(part) > self.room:
                self.newline()
            while cells(part) > self.room:  # a run of letters longer than a line: cut
                cut = _head(part, self.room)
                self.append(part[:cut])
                part = part[cut:]
                self.newline()
            self.append(part)

    def append(self, text: str) -> None:
        self.line += text
        self.used += cells(text)

    def newline(self) -> None:
        if self.line.strip():
            self.lines.append(self.line.rstrip())
            self.room = self.rest
        self.line = ""
        self.used = 0

    def done(self) -> list[str]:
        self.newline()
        return self.lines or [""]


def preview(text: str, width: int) -> str:
    """The first line of ``text`` within ``width`` columns, cut between words and ending
    in ``…`` where it was cut (a task's prompt in a listing)."""
    lines = text.splitlines()
    first = lines[0] if lines else ""
    if cells(first) <= width and len(lines) <= 1:
        return first
    return wrap_words(first, width - 1)[0].rstrip(",;:") + "…"
