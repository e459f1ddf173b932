"""An imp's interaction memory: read it, add to it, forget from it.

Reads come from ``memory/<imp>.jsonl`` or, when that file does not exist, the
legacy ``notes/<imp>.jsonl``. Writes only ever touch ``memory/``: a write for an
imp that still has only a legacy file first migrates it (under the same lock),
so the new entry never hides the old ones behind the ``memory/``-wins rule.
Nothing here reads knowledge repos, checkouts or run directories.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from impyard.common.errors import NotFoundError
from impyard.common.names import check_imp_name, utc_now
from impyard.home import Home
from impyard.imp_lookup import require_imp_name
from impyard.memory.entry import (
    DEFAULT_KIND,
    MemoryEntry,
    check_kind,
    check_label,
    check_text,
    new_memory_id,
)
from impyard.memory.files import (
    append_line,
    encode_entry,
    read_lines,
    read_lock,
    remove_file,
    rewrite_lines,
    write_lock,
)
from impyard.memory.migrate import Migration, migrate_locked


@dataclass(frozen=True)
class MemoryWarning:
    """An unreadable stored line: skipped on read, never fatal."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: skipped unreadable memory line ({self.reason})"


@dataclass(frozen=True)
class MemoryRead:
    path: Path | None  # the file read; None when the imp has no memory yet
    entries: tuple[MemoryEntry, ...]  # in stored (append) order
    warnings: tuple[MemoryWarning, ...]
    legacy: bool  # read from the legacy notes/ file
    shadowed_legacy: Path | None  # a legacy file not read because memory/ exists


@dataclass(frozen=True)
class Added:
    entry: MemoryEntry
    migration: Migration | None  # set when a legacy file was migrated first


def require_imp(home: Home, imp: str) -> str:
    """The imp's name, if it is valid and the imp exists (its canonical repo is there)."""
    return require_imp_name(home, imp)


def source_file(home: Home, imp: str) -> Path | None:
    for path in (home.memory_file(imp), home.legacy_memory_file(imp)):
        if path.is_file():
            return path
    return None


def read_memory(home: Home, imp: str) -> MemoryRead:
    check_imp_name(imp)
    with read_lock(home, imp):
        path = source_file(home, imp)
        lines = read_lines(path, imp) if path is not None else []
    legacy = home.legacy_memory_file(imp)
    return MemoryRead(
        path=path,
        entries=tuple(line.entry for line in lines if line.entry is not None),
        warnings=tuple(
            MemoryWarning(path, line.number, line.problem)
            for line in lines
            if path is not None and line.problem is not None
        ),
        legacy=path is not None and path == legacy,
        shadowed_legacy=legacy if path == home.memory_file(imp) and legacy.is_file() else None,
    )


def _migrate_if_legacy_only(home: Home, imp: str) -> Migration | None:
    if home.memory_file(imp).exists() or not home.legacy_memory_file(imp).is_file():
        return None
    return migrate_locked(home, imp)


def add_entry(
    home: Home,
    imp: str,
    text: str,
    *,
    channel: str | None = None,
    user: str | None = None,
    kind: str = DEFAULT_KIND,
) -> Added:
    """Append one entry durably; safe against concurrent writers in any process."""
    require_imp(home, imp)
    entry = MemoryEntry(
        id=new_memory_id(),
        ts=utc_now(),
        imp=imp,
        channel=check_label("channel", channel),
        user=check_label("user", user),
        kind=check_kind(kind),
        text=check_text(text),
    )
    with write_lock(home, imp):
        migration = _migrate_if_legacy_only(home, imp)
        append_line(home.memory_file(imp), encode_entry(entry))
    return Added(entry, migration)


def forget_entry(home: Home, imp: str, entry_id: str) -> MemoryEntry:
    """Remove one entry by id (the owner's removal); the file is rewritten atomically."""
    require_imp(home, imp)
    with write_lock(home, imp):
        path = source_file(home, imp)
        lines = read_lines(path, imp) if path is not None else []
        keep = [line for line in lines if line.entry is None or line.entry.id != entry_id]
        gone = [
            line.entry for line in lines if line.entry is not None and line.entry.id == entry_id
        ]
        if not gone or path is None:
            raise NotFoundError(
                f"imp {imp!r} has no memory entry {entry_id!r} (see `impyard memory {imp} list`)"
            )
        # A legacy-only imp's file is rewritten into memory/: writes never go to notes/.
        rewrite_lines(home.memory_file(imp), keep)
        if path != home.memory_file(imp):
            remove_file(path)
    return gone[0]
