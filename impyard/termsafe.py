"""Box-written bytes made safe for the owner's terminal.

A box (and anything it ran: a model's answer, a downloaded page, a tool's output) can
print escape sequences that retitle the terminal (``ESC ] 0 ; … BEL``), clear it
(``ESC [ 2 J``), move the cursor over lines already shown, or, on some terminals,
answer back into the shell's input. Shown text keeps printable characters, newlines
and tabs; every other control character (C0, DEL, C1, a carriage return) and every
byte that is not UTF-8 becomes a visible escape such as ``\\x1b``.
"""

from __future__ import annotations

import codecs

_KEEP = {ord("\n"), ord("\t")}
_CONTROLS = [c for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in _KEEP]
#: Control characters, and the bytes ``surrogateescape`` decoding kept (U+DC80 to U+DCFF).
_TABLE: dict[int, str] = {c: f"\\x{c:02x}" for c in _CONTROLS} | {
    0xDC00 + b: f"\\x{b:02x}" for b in range(0x80, 0x100)
}


def escape_text(text: str) -> str:
    """``text`` with every control character shown as an escape (newlines and tabs kept)."""
    return text.translate(_TABLE)


class StreamEscaper:
    """Escapes a byte stream piece by piece: a UTF-8 character split across two pieces
    is decoded whole, and what is left undecodable at the end is shown as bytes."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data).translate(_TABLE)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True).translate(_TABLE)
