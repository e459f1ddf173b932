"""How far behind each imp's backup is at each configured remote (``backup status``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from impyard.backup.remotes import label
from impyard.backup.status import RemoteStatus, read_status
from impyard.backup.sync import configured_remotes
from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.knowledge.imps import list_imps, open_repo
from impyard.knowledge.store.repo import main_commit


@dataclass(frozen=True)
class BackupRow:
    imp: str
    remote: str
    main: str | None  # the imp's main now (None: unreadable)
    pushed_at: str | None
    pushed_main: str | None
    lagging: bool  # the remote's main (as last pushed) is not main now, or never pushed
    last_error: str | None
    failing_since: str | None
    attempts: int

    @property
    def failing(self) -> bool:
        return self.last_error is not None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "failing": self.failing}


def backup_rows(home: Home, imps: list[str] | None = None) -> list[BackupRow]:
    """One row per imp and configured remote, in imp then remote order."""
    remotes = [label(base) for base in configured_remotes(home)]
    status = read_status(home)
    rows = []
    for imp in imps if imps is not None else list_imps(home):
        try:
            main: str | None = main_commit(open_repo(home, imp))
        except ImpyardError:
            main = None
        for remote in remotes:
            entry = status.get(imp, {}).get(remote, RemoteStatus())
            rows.append(
                BackupRow(
                    imp=imp,
                    remote=remote,
                    main=main,
                    pushed_at=entry.pushed_at,
                    pushed_main=entry.pushed_main,
                    lagging=entry.pushed_main is None or entry.pushed_main != main,
                    last_error=entry.last_error,
                    failing_since=entry.failing_since,
                    attempts=entry.attempts,
                )
            )
    return rows
