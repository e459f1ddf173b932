"""A preserved change seen against the CURRENT main: per path, what landing it would do
(add, modify, delete, or nothing), and bounded unified diffs of text files.

Main moves on after a change is preserved, so "what the run changed" (against its base)
is not what the owner decides on; this is. Output is bounded (files, lines, bytes) and
box-written text never reaches a terminal raw: control characters are shown escaped.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

import pygit2

from impyard.common.textsafe import visible
from impyard.knowledge.change import Change
from impyard.knowledge.checkouts.treefs import is_blob, is_executable
from impyard.knowledge.store.gitobj import lookup_entry
from impyard.knowledge.store.repo import main_commit

Status = Literal["added", "modified", "deleted", "unchanged"]

#: Most files a listing names (all are counted).
MAX_FILES = 1000
#: Most diff lines shown per file, most diff bytes in all, largest blob diffed.
MAX_LINES_PER_FILE = 400
MAX_DIFF_BYTES = 256 * 1024
MAX_BLOB_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FileChange:
    path: str
    status: Status
    #: The preserved file (None for a deletion).
    blob: str | None
    size: int | None
    executable: bool
    #: Main's file at the path now (None when main has no file there).
    main_blob: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "blob": self.blob,
            "size": self.size,
            "executable": self.executable,
            "main_blob": self.main_blob,
        }


def against_main(repo: pygit2.Repository, change: Change) -> list[FileChange]:
    """Every path of ``change`` with what landing it on main as it is now would do."""
    head = repo[main_commit(repo)].peel(pygit2.Commit).tree
    found: list[FileChange] = []
    for path in sorted(set(change.written) | change.deleted):
        now = lookup_entry(head, path)
        main_file = now if now is not None and is_blob(now) else None
        main_blob = str(main_file.id) if main_file is not None else None
        state = change.written.get(path)
        if state is None:
            status: Status = "deleted" if main_file is not None else "unchanged"
            found.append(FileChange(path, status, None, None, False, main_blob))
            continue
        if main_file is None:
            status = "added"
        elif main_blob == state.blob and is_executable(main_file) == state.executable:
            status = "unchanged"
        else:
            status = "modified"
        found.append(FileChange(path, status, state.blob, state.size, state.executable, main_blob))
    return found


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: Status
    binary: bool
    #: The unified diff (escaped), or a one-line note for binary or oversized files.
    text: str
    truncated: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "binary": self.binary,
            "diff": self.text,
            "truncated": self.truncated,
        }


@dataclass(frozen=True)
class Diff:
    files: list[FileDiff]
    #: Files that change main (unchanged ones are not diffed).
    total: int
    #: Whether files were left out for the byte budget.
    truncated: bool


def diff_against_main(repo: pygit2.Repository, change: Change, label: str) -> Diff:
    """Unified diffs from main's files to the preserved ones (``label`` names the latter)."""
    changed = [c for c in against_main(repo, change) if c.status != "unchanged"]
    budget = MAX_DIFF_BYTES
    files: list[FileDiff] = []
    for item in changed:
        if budget <= 0 or len(files) >= MAX_FILES:
            return Diff(files, len(changed), True)
        shown = _file_diff(repo, item, label)
        budget -= len(shown.text.encode())
        files.append(shown)
    return Diff(files, len(changed), False)


def _file_diff(repo: pygit2.Repository, item: FileChange, label: str) -> FileDiff:
    old = _text(repo, item.main_blob)
    new = _text(repo, item.blob)
    if old is None or new is None:
        return FileDiff(item.path, item.status, True, "binary or too large to diff", False)
    before = f"a/{visible(item.path)}" if item.main_blob else "/dev/null"
    after = f"{label}/{visible(item.path)}" if item.blob else "/dev/null"
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), before, after, lineterm="")
    )
    truncated = len(lines) > MAX_LINES_PER_FILE
    if truncated:
        left = len(lines) - MAX_LINES_PER_FILE
        lines = [*lines[:MAX_LINES_PER_FILE], f"... {left} more line(s) not shown"]
    text = "\n".join(visible(line) for line in lines)
    return FileDiff(item.path, item.status, False, text, truncated)


def _text(repo: pygit2.Repository, blob: str | None) -> str | None:
    """A blob as text ("" for none); None when it is binary or too large to diff."""
    if blob is None:
        return ""
    obj = repo[blob]
    if not isinstance(obj, pygit2.Blob) or obj.size > MAX_BLOB_BYTES:
        return None
    data = obj.data
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
