"""Which entries a run (and ``impyard memory <imp> recall``) receives, in which order.

One function serves both, so what an owner recalls is exactly what a box sees.
"""

from __future__ import annotations

from collections.abc import Iterable

from impyard.common.errors import UsageError
from impyard.memory.entry import MemoryEntry

DEFAULT_LIMIT = 20


def select_entries(
    entries: Iterable[MemoryEntry],
    channel: str | None,
    *,
    query: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[MemoryEntry]:
    """Entries for ``channel`` newest first, then imp-wide entries (no channel) newest first.

    Entries of other channels are never selected: what was said in one channel
    stays there. With ``channel=None`` only imp-wide entries qualify. ``query``
    keeps entries whose text contains it, ignoring case. At most ``limit``.
    """
    if limit < 1:
        raise UsageError(f"memory limit must be at least 1, not {limit}")
    needle = query.casefold() if query else None
    # Newest first: by timestamp, and among equal stamps the later-stored line.
    ordered = sorted(enumerate(entries), key=lambda pair: (pair[1].ts, pair[0]), reverse=True)
    matching = [entry for _, entry in ordered if needle is None or needle in entry.text.casefold()]
    own = [entry for entry in matching if channel is not None and entry.channel == channel]
    shared = [entry for entry in matching if entry.channel is None]
    return (own + shared)[:limit]
