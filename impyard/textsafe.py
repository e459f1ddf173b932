"""Text made safe to print as part of one terminal line.

Text a box chose (a file name, a tool's output, a reason quoting either) can hold an
escape sequence that clears the owner's screen (``ESC [2J``), retitles the terminal
(``ESC ]0;…BEL``), forges a line of output after a newline, or reorders what follows it
(bidirectional overrides). ``one_line`` escapes every such character, Python-style, so
it shows as text, and bounds the length, so one name cannot flood a log line.
"""

from __future__ import annotations

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
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


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
