"""Back up one imp to every configured remote, now: push, record the status, journal it.

The remotes are the org policy's ``[backup] remotes`` as last deployed
(``compiled.json``); a relative local path there is taken from the data root.
Pushes of one imp are serialized across processes (``backup/<imp>.lock``), so a
later push always reads refs at least as new as an earlier one pushed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from impyard.backup import status
from impyard.common.fsutil import locked
from impyard.home import Home
from impyard.journal.log import Journal

if TYPE_CHECKING:
    from impyard.backup.push import PushResult


def configured_remotes(home: Home) -> list[str]:
    from impyard.policy.compile import deployed_org_policy  # pydantic only when needed

    return list(dict.fromkeys(deployed_org_policy(home).backup.remotes))


def backup_imp(
    home: Home,
    imp: str,
    *,
    remotes: list[str] | None = None,
    attempts: int | None = None,
    abandon: threading.Event | None = None,
) -> list[PushResult]:
    """Push ``imp`` to each remote (default: the configured ones); a failure is a result,
    never an exception. ``attempts``: per remote, default ``push.ATTEMPTS``."""
    bases = configured_remotes(home) if remotes is None else remotes
    if not bases:
        return []
    # Only now: a data root without remotes (every foreground run's notify) never
    # loads the push machinery.
    from impyard.backup.push import ATTEMPTS, push
    from impyard.backup.remotes import locate

    attempts = ATTEMPTS if attempts is None else attempts
    home.backup_dir.mkdir(exist_ok=True)
    results: list[PushResult] = []
    with locked(home.backup_dir / f"{imp}.lock"):
        known = status.read_status(home).get(imp, {})
        for base in bases:
            location = locate(base, imp, home.root)
            # A remote already failing gets one try a round: its backoff would otherwise
            # hold up every other imp's push behind it on the one worker thread.
            entry = known.get(location.label)
            tries = 1 if entry is not None and entry.failing else attempts
            results.append(push(home, imp, location, attempts=tries, abandon=abandon))
        status.record(home, imp, results, [locate(b, imp, home.root).label for b in bases])
    journal = Journal(home.journal)
    for result in results:
        if not result.ok:
            journal.record(
                "backup.failed",
                imp=imp,
                remote=result.remote,
                error=result.error,
                attempts=result.attempts,
            )
        elif result.updated or result.deleted:
            journal.record(
                "backup.pushed",
                imp=imp,
                remote=result.remote,
                commit=result.main,
                updated=result.updated,
                deleted=result.deleted,
                attempts=result.attempts,
                duration_ms=result.duration_ms,
            )
    return results
