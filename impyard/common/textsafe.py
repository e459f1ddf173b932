"""Text made safe to print as part of one terminal line.

Text a box chose (a file name, a tool's output, a reason quoting either) can hold an
escape sequence that clears the owner's screen (``ESC [2J``), retitles the terminal
(``ESC ]0;…BEL``), forges a line of output after a newline, or reorders what follows it
(bidirectional overrides). ``one_line`` escapes every such character, Python-style, so
it shows as text, and bounds the length, so one name cannot flood a log line.
"""

from __future__ import annotations

import codecs
import re

#: How many characters ``one_line`` keeps by default.
DEFAULT_LIMIT = 240

#: Marks a cut: the text went on past the limit.
ELLIPSIS = "…"

#: Escaped: C0 controls (newline and ESC among them), DEL, C1 controls (CSI, OSC, NEL are
#: single characters there), the Unicode line and paragraph separators, bidirectional
#: marks, embeddings, overrides and isolates, and lone surrogates (a file name decoded with
#: surrogateescape: printing one would raise). A backslash stays as it is: paths the
#: snapshot could not take as names already come as a ``repr``, escapes and all.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    return _escape_char(match.group())


def _escape_char(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _table() -> dict[int, str]:
    """The escapes of ``_UNSAFE`` for ``str.translate``, newline and tab kept: output of
    many lines (a box's log) escaped at the speed of one C loop."""
    # Built from the ranges of ``_UNSAFE`` directly: a regex match per code point cost every
    # command that prints 5 ms of start-up.
    controls = (*range(0x20), *range(0x7F, 0xA0), *_OTHER_UNSAFE)
    table = {code: _escape_char(chr(code)) for code in controls if chr(code) not in "\n\t"}
    table.update({code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)})
    # What ``surrogateescape`` made of a byte that is not UTF-8: shown as that byte.
    table.update({0xDC00 + b: f"\\x{b:02x}" for b in range(0x80, 0x100)})
    return table


_OTHER_UNSAFE = (
    0x061C,
    0x200E,
    0x200F,
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
)


def visible(text: str) -> str:
    """``text`` on one line: every unsafe character escaped, a newline as ``\\n`` too."""
    return text.translate(_LINE_TABLE)


def escape_text(text: str) -> str:
    """``text`` with every unsafe character escaped, its newlines and tabs kept."""
    return text.translate(_TABLE)


class StreamEscaper:
    """Escapes a byte stream piece by piece (a box's output as it arrives): a UTF-8
    character split across two pieces is decoded whole, and a byte that is not UTF-8 is
    shown as ``\\xNN``."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data).translate(_TABLE)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True).translate(_TABLE)


def one_line(text: str, limit: int = DEFAULT_LIMIT) -> str:
    """``text`` with every control character escaped, at most ``limit`` characters long.

    A longer result is cut, never inside an escape, and ends with ``…``. Only the first
    ``limit + 1`` characters are read, so a huge text costs no more than a short one.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    # Escaping only lengthens: what lies past limit + 1 characters can only be cut.
    head = text[: limit + 1]
    pieces: list[tuple[str, bool]] = []  # (text, whether it is one escape)
    start = 0
    for match in _UNSAFE.finditer(head):
        pieces.append((head[start : match.start()], False))
        pieces.append((_escape(match), True))
        start = match.end()
    pieces.append((head[start:], False))
    if len(text) <= limit and sum(len(piece) for piece, _ in pieces) <= limit:
        return "".join(piece for piece, _ in pieces)
    return _cut(pieces, limit - len(ELLIPSIS)) + ELLIPSIS


def _cut(pieces: list[tuple[str, bool]], room: int) -> str:
    """The pieces that fit in ``room`` characters; an escape is kept whole or left out."""
    kept: list[str] = []
    for piece, escape in pieces:
        if len(piece) > room:
            if not escape:
                kept.append(piece[:room])
            break
        kept.append(piece)
        room -= len(piece)
    return "".join(kept)


_TABLE = _table()
_LINE_TABLE = _TABLE | {ord("\n"): "\\n"}
