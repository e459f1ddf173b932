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
        return max(MIN_WIDTH, os.get_terminal_size(stdout.fileno() if stdout else 1).columns)
    except (ValueError, OSError):  # stdout closed, or not a terminal
        return 80


def styled_output() -> bool:
    """Whether colour and bold may be written: a terminal that is not ``dumb``, and no
    ``NO_COLOR`` (no-color.org: any non-empty value)."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def wrap_words(text: str, width: int, *, indent: int = 0) -> list[str]:
    """``text`` as lines of at most ``width`` characters, broken between words, and inside
    a word (after its joining punctuation) only when it is longer than a whole line. Lines
    after the first are indented by ``indent``: a hanging indent shows where one entry (a
    journal event, a serve line) ends and the next begins."""
    if len(text) <= width:
        return [text]
    folded = _Folder(width, max(1, width - indent))
    for word in _WORD.findall(text):
        folded.add(word)
    lines = folded.done()
    pad = " " * indent
    return [lines[0], *(pad + line for line in lines[1:])]


class _Folder:
    def __init__(self, first: int, rest: int) -> None:
        self.lines: list[str] = []
        self.line = ""
        self.room = first
        self.rest = rest

    def add(self, word: str) -> None:
        if word.isspace():
            if self.line:
                self.line += word
            return
        if len(self.line) + len(word) <= self.room:
            self.line += word
            return
        self.newline()
        if len(word) <= self.room:
            self.line = word
            return
        # Longer than a line: folded between its parts.
        for part in filter(None, _PART.findall(word)):
            if len(self.line) + len(part) > self.room:
                self.newline()
            while len(part) > self.room:  # a run of letters longer than a line: cut
                self.line = part[: self.room]
                part = part[self.room :]
                self.newline()
            self.line += part

    def newline(self) -> None:
        if self.line.strip():
            self.lines.append(self.line.rstrip())
            self.room = self.rest
        self.line = ""

    def done(self) -> list[str]:
        self.newline()
        return self.lines or [""]
