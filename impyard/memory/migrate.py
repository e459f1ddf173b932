"""Moving legacy ``notes/<imp>.jsonl`` files into ``memory/``.

The rule: ``memory/`` wins and nothing is lost. When ``memory/<imp>.jsonl`` does
not exist the legacy lines become it, verbatim. When it does exist the legacy
lines are merged in: every legacy line whose entry id (or, for an unreadable
line, whose bytes) is not already there is appended after the existing lines.
The merged file is written atomically before the legacy file is removed, so a
crash in between leaves both files, and running ``migrate`` again is a no-op
merge (every legacy line is then a duplicate) that finishes the removal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from impyard.common.names import IMP_NAME, check_imp_name
from impyard.home import Home
from impyard.memory.files import (
    read_lines,
    remove_file,
    rewrite_lines,
    write_lock,
)

Action = Literal["moved", "merged", "nothing"]


@dataclass(frozen=True)
class Migration:
    imp: str
    action: Action
    entries: int  # readable legacy entries now in memory/
    duplicates: int  # legacy lines already present in memory/, dropped
    unreadable: int  # unreadable legacy lines carried over verbatim (nothing is dropped silently)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def migrate_locked(home: Home, imp: str) -> Migration:
    """Migrate one imp's legacy file. The caller holds ``write_lock(home, imp)``."""
    legacy = home.legacy_memory_file(imp)
    if not legacy.is_file():
        return Migration(imp, "nothing", 0, 0, 0)
    target = home.memory_file(imp)
    existing = read_lines(target, imp)
    seen = {line.key for line in existing}
    carried = []
    duplicates = 0
    for line in read_lines(legacy, imp):
        if line.key in seen:
            duplicates += 1
            continue
        seen.add(line.key)
        carried.append(line)
    action: Action = "merged" if target.exists() else "moved"
    rewrite_lines(target, existing + carried)
    remove_file(legacy)
    unreadable = sum(1 for line in carried if line.entry is None)
    return Migration(imp, action, len(carried) - unreadable, duplicates, unreadable)


def migrate(home: Home, imp: str) -> Migration:
    check_imp_name(imp)
    with write_lock(home, imp):
        return migrate_locked(home, imp)


def migrate_all(home: Home) -> list[Migration]:
    """Migrate every legacy file named like an imp; other files in ``notes/`` are left alone."""
    if not home.legacy_notes_dir.is_dir():
        return []
    imps = sorted(
        path.stem
        for path in home.legacy_notes_dir.glob("*.jsonl")
        if IMP_NAME.fullmatch(path.stem) and path.is_file()
    )
    return [migrate(home, imp) for imp in imps]
