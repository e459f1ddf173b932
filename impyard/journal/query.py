"""Which journal events a reader asked for: an imp, a run, event-name globs, a start time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from fnmatch import fnmatchcase
from typing import Any

from impyard.common.errors import UsageError
from impyard.common.names import utc_epoch, utc_stamp

_AGE = re.compile(r"([0-9]+)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class JournalQuery:
    """An event matches when it meets every filter given. ``since`` is a stamp as
    ``names.utc_stamp`` writes the journal's ``ts``: fixed width, so compared as text."""

    imp: str | None = None
    run: str | None = None
    events: tuple[str, ...] = ()
    since: str | None = None

    def matches(self, entry: dict[str, Any]) -> bool:
        if self.imp is not None and entry.get("imp") != self.imp:
            return False
        if self.run is not None and entry.get("run") != self.run:
            return False
        if self.events:
            name = entry.get("event")
            if not isinstance(name, str):
                return False
            if not any(fnmatchcase(name, pattern) for pattern in self.events):
                return False
        if self.since is not None:
            ts = entry.get("ts")
            if not isinstance(ts, str) or ts < self.since:
                return False
        return True


def make_query(
    *,
    imp: str | None = None,
    run: str | None = None,
    events: Sequence[str] = (),
    since: str | None = None,
    now: float,
) -> JournalQuery:
    """A query from what an owner typed; ``since`` as ``parse_since`` reads it."""
    return JournalQuery(
        imp=imp,
        run=run,
        events=tuple(events),
        since=None if since is None else utc_stamp(parse_since(since, now)),
    )


def parse_since(text: str, now: float) -> float:
    """Seconds since the epoch for ``--since``: an age before ``now`` (``30s``, ``10m``,
    ``2h``, ``1d``), a UTC time as the journal writes it (``2024-05-01T12:00:00.000000Z``,
    any fraction or none, or a ``+00:00`` offset), or a date alone (its midnight, UTC)."""
    value = text.strip()
    age = _AGE.fullmatch(value)
    if age is not None:
        return now - int(age[1]) * _UNIT_SECONDS[age[2]]
    try:
        epoch = utc_epoch(value)  # raises on a date that does not exist (month 13)
        if epoch is not None:
            return epoch
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is not None and moment.utcoffset() is not None and not moment.utcoffset():
        return moment.timestamp()
    raise UsageError(
        f"--since {text!r}: not a UTC time (2024-05-01T12:00:00Z, or a date 2024-05-01) "
        "or an age (30s, 10m, 2h, 1d)"
    )
