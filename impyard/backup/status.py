"""``<home>/backup/status.json``: how each imp's backup stands at each remote.

Shape (one JSON object; read by ``impyard backup status`` and ``impyard status``)::

    {
      "<imp>": {
        "<remote>": {
          "pushed_at": "2026-07-11T12:00:00Z" | null,
          "pushed_main": "<40 hex>" | null,
          "last_error": "<one line>" | null,
          "failing_since": "2026-07-11T12:05:00Z" | null,
          "attempts": 0
        }
      }
    }

``<remote>`` is the remote as configured in ``[backup] remotes``, with the password of
a URL's userinfo replaced by ``***``. ``pushed_at`` is the last time a push left the
remote holding our refs (an up-to-date remote counts), ``pushed_main`` the main it
held then: the backup lags while that differs from the imp's main. ``last_error``
and ``failing_since`` (the first failure since then) are null while the remote is
fine; ``attempts`` counts push attempts that failed since the last success (0 when
fine). A remote no longer configured is dropped when its imp is next pushed.

Written whole, atomically (temp file, fsync, rename), under ``backup/status.lock``,
so concurrent processes never lose each other's entries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from impyard.common.fsutil import atomic_write_json, locked
from impyard.common.names import utc_now
from impyard.home import Home

if TYPE_CHECKING:
    from impyard.backup.push import PushResult


@dataclass(frozen=True)
class RemoteStatus:
    pushed_at: str | None = None
    pushed_main: str | None = None
    last_error: str | None = None
    failing_since: str | None = None
    attempts: int = 0

    @property
    def failing(self) -> bool:
        return self.last_error is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Status = dict[str, dict[str, RemoteStatus]]


def read_status(home: Home) -> Status:
    """Every imp's status by remote; a missing or unreadable file is no status."""
    try:
        raw: Any = json.loads(home.backup_status.read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    status: Status = {}
    for imp, remotes in raw.items():
        if not isinstance(imp, str) or not isinstance(remotes, dict):
            continue
        status[imp] = {
            remote: _entry(value)
            for remote, value in remotes.items()
            if isinstance(remote, str) and isinstance(value, dict)
        }
    return status


def _entry(value: dict[str, Any]) -> RemoteStatus:
    def text(key: str) -> str | None:
        found = value.get(key)
        return found if isinstance(found, str) else None

    attempts = value.get("attempts")
    return RemoteStatus(
        pushed_at=text("pushed_at"),
        pushed_main=text("pushed_main"),
        last_error=text("last_error"),
        failing_since=text("failing_since"),
        attempts=attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
    )


def record(home: Home, imp: str, results: Iterable[PushResult], configured: Iterable[str]) -> None:
    """Fold one round of pushes of ``imp`` into status.json; drop remotes not configured."""
    home.backup_dir.mkdir(exist_ok=True)  # never parents: a vanished data root stays gone
    now = utc_now()
    with locked(home.backup_status_lock):
        status = read_status(home)
        before = status.get(imp, {})
        after = {remote: before[remote] for remote in configured if remote in before}
        for result in results:
            after[result.remote] = _next(before.get(result.remote, RemoteStatus()), result, now)
        if after:
            status[imp] = after
        else:
            status.pop(imp, None)
        document = {
            name: {remote: entry.as_dict() for remote, entry in sorted(remotes.items())}
            for name, remotes in sorted(status.items())
        }
        atomic_write_json(home.backup_status, document)


def _next(previous: RemoteStatus, result: PushResult, now: str) -> RemoteStatus:
    if result.ok:
        return RemoteStatus(pushed_at=now, pushed_main=result.main)
    return RemoteStatus(
        pushed_at=previous.pushed_at,
        pushed_main=previous.pushed_main,
        last_error=result.error,
        failing_since=previous.failing_since or now,
        attempts=previous.attempts + result.attempts,
    )
