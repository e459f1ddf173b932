"""One interaction-memory entry: its fields, its limits and how a stored line becomes one.

Memory is person-space continuity (who said what, which channel prefers what),
never world knowledge; see SPEC "Interaction memory remains separate".
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from impyard.common.errors import UsageError

Kind = Literal["note", "fact", "preference", "summary"]
KINDS: tuple[Kind, ...] = get_args(Kind)
DEFAULT_KIND: Kind = "note"

# One entry is a remark, not a document: a bound keeps a single add from
# crowding every other entry out of a run's bounded Memory block.
MAX_TEXT_BYTES = 8192
MAX_LABEL_CHARS = 128


@dataclass(frozen=True)
class MemoryEntry:
    id: str
    ts: str
    imp: str
    channel: str | None
    user: str | None
    kind: Kind
    text: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def new_memory_id() -> str:
    """``m_`` + 14 hex digits of microseconds since the epoch + 40 random bits.

    Time first so ids sort in creation order; the random part keeps ids unique
    across processes that add in the same microsecond.
    """
    return f"m_{time.time_ns() // 1000:014x}{secrets.token_hex(5)}"


def check_kind(kind: str) -> Kind:
    for known in KINDS:
        if kind == known:
            return known
    raise UsageError(f"invalid memory kind {kind!r}: use one of {', '.join(KINDS)}")


def check_text(text: str) -> str:
    if not text.strip():
        raise UsageError("memory text is empty")
    size = len(text.encode())
    if size > MAX_TEXT_BYTES:
        raise UsageError(
            f"memory text is {size} bytes; the limit is {MAX_TEXT_BYTES} bytes per entry "
            "(store a short summary instead)"
        )
    return text


def check_label(what: str, value: str | None) -> str | None:
    """A channel or user name: optional, one line, bounded."""
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"{what} is empty")
    if len(value) > MAX_LABEL_CHARS:
        raise UsageError(f"{what} {value[:40]!r}... is longer than {MAX_LABEL_CHARS} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"{what} {value!r} contains control characters")
    return value


def _label(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def entry_from_record(record: dict[str, Any], raw: bytes, imp: str) -> MemoryEntry | str:
    """A stored object as an entry, or the reason it is unusable.

    Tolerant on purpose: legacy ``notes/`` lines may lack an id or kind. A missing
    id is derived from the line's bytes, so it is stable across reads and across
    ``migrate`` (which moves lines verbatim) and ``forget`` can address it. The
    imp is the file's imp: identity comes from where the host stored the line.
    """
    text = record.get("text")
    if not isinstance(text, str):
        return "no text field"
    entry_id = record.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        entry_id = "l_" + hashlib.sha256(raw.strip()).hexdigest()[:22]
    ts = record.get("ts")
    kind = record.get("kind")
    return MemoryEntry(
        id=entry_id,
        ts=ts if isinstance(ts, str) else "",
        imp=imp,
        channel=_label(record.get("channel")),
        user=_label(record.get("user")),
        kind=check_kind(kind) if isinstance(kind, str) and kind in KINDS else DEFAULT_KIND,
        text=text,
    )
