"""The ``## Memory`` block a run's task file gets when the task carries a channel.

It is built from ``memory/`` (or legacy ``notes/``) alone — never from the
knowledge checkout, the canonical repo or run directories — so nothing an imp
wrote into knowledge can come back to it dressed as memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from impyard.home import Home
from impyard.memory.entry import MemoryEntry
from impyard.memory.select import DEFAULT_LIMIT, select_entries
from impyard.memory.store import read_memory

DEFAULT_MAX_CHARS = 4000
HEADING = (
    "## Memory\n\n"
    "From earlier interactions (this channel first, newest first). "
    "Continuity about people and conversations, not verified knowledge.\n\n"
)


def render_entry(entry: MemoryEntry) -> str:
    """One bullet; continuation lines are indented so a multi-line text stays in its bullet."""
    when = entry.ts[:16].replace("T", " ") or "undated"
    labels = [when, f"#{entry.channel}" if entry.channel else "imp-wide"]
    if entry.user:
        labels.append(f"@{entry.user}")
    labels.append(entry.kind)
    text = "\n  ".join(entry.text.strip().splitlines())
    return f"- [{' · '.join(labels)}] {text}\n"


def render_block(entries: Sequence[MemoryEntry], max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The block for already-selected ``entries``, at most ``max_chars`` characters in all.

    Entries are kept whole: one that does not fit is left out and the next,
    smaller one may still fit. "" when no entry fits (a bare heading says nothing).
    """
    parts: list[str] = []
    size = len(HEADING)
    for entry in entries:
        bullet = render_entry(entry)
        if size + len(bullet) <= max_chars:
            parts.append(bullet)
            size += len(bullet)
    if not parts:
        return ""
    return HEADING + "".join(parts)


def memory_block(
    home: Home,
    imp: str,
    channel: str | None,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    limit: int = DEFAULT_LIMIT,
) -> str:
    """The Memory block for a run of ``imp`` in ``channel``; "" when there is nothing.

    Unreadable stored lines are skipped (``read_memory`` reports them). The
    pipeline adds this block only when a task carries a channel.
    """
    entries = select_entries(read_memory(home, imp).entries, channel, limit=limit)
    return render_block(entries, max_chars)
