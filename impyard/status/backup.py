"""Backup lag per imp and remote, read from ``<home>/backup/status.json``.

The backup writes ``{imp: {remote: {pushed_at, pushed_main, last_error, failing_since,
attempts}}}`` (remote as a label, never with a password). This module only reads it:
a remote with an error is failing, one whose ``pushed_main`` is not the imp's main is
lagging, and with ``[backup] remotes`` configured an imp without any entry was never
backed up. Anything unreadable is reported, never raised.
"""

from __future__ import annotations

import json
from typing import Any

from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.status.model import BackupSection, BackupState, ImpBackup, ImpKnowledge, RemoteBackup


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _behind(home: Home, imp: str, main: str, pushed: str) -> int | None:
    """Commits on main not in what was pushed (None when the pushed commit is unknown here)."""
    import pygit2

    from impyard.knowledge.imps import open_repo

    try:
        ahead, _ = open_repo(home, imp).ahead_behind(main, pushed)
    except (ImpyardError, pygit2.GitError, KeyError, ValueError):
        return None  # a commit this repo lacks, a broken repo: the lag stays unknown
    return int(ahead)


def _remote(home: Home, imp: str, remote: str, raw: Any, main: str | None) -> RemoteBackup:
    entry = raw if isinstance(raw, dict) else {}
    attempts = entry.get("attempts")
    found = RemoteBackup(
        remote=remote,
        state="unknown",
        pushed_at=_text(entry.get("pushed_at")),
        pushed_main=_text(entry.get("pushed_main")),
        last_error=_text(entry.get("last_error")),
        failing_since=_text(entry.get("failing_since")),
        attempts=attempts if isinstance(attempts, int) else None,
    )
    state: BackupState
    if found.last_error or found.failing_since:
        state = "failing"
    elif main is None:
        state = "unknown"
    elif found.pushed_main == main:
        state, found.behind = "current", 0
    else:
        state = "lagging"
        if found.pushed_main is not None:
            found.behind = _behind(home, imp, main, found.pushed_main)
    found.state = state
    return found


def backup_section(
    home: Home, configured_remotes: int, knowledge: list[ImpKnowledge]
) -> BackupSection:
    path = home.backup_status
    section = BackupSection(
        configured_remotes=configured_remotes, status_file=str(path), status_present=False
    )
    document: Any = {}
    try:
        document = json.loads(path.read_bytes())
        section.status_present = True
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        section.error = f"cannot read {path}: {exc}"
    if not isinstance(document, dict):
        section.error = f"{path} is not a JSON object"
        document = {}
    for known in knowledge:
        remotes = document.get(known.imp)
        remotes = remotes if isinstance(remotes, dict) else {}
        imp = ImpBackup(
            imp=known.imp,
            remotes=[
                _remote(home, known.imp, str(name), raw, known.main)
                for name, raw in sorted(remotes.items())
            ],
        )
        # Only when backups are wanted: without remotes an empty entry is expected.
        imp.never_backed_up = configured_remotes > 0 and not any(
            r.pushed_at or r.pushed_main for r in imp.remotes
        )
        if imp.remotes or imp.never_backed_up:
            section.imps.append(imp)
    return section
