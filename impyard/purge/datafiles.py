"""The purged text in the data root's files, outside the repositories: found in every
file, then redacted where the file is text, and deleted where it is a copy.

Where a purged string can rest besides Git: the journal, run directories (box logs,
task files, receipts, manifests), memory, exports, the task queue's database, archived
response bodies, loop-mounted run spaces (an image keeps deleted blocks) and checkout
layers. Text files have every occurrence, raw or JSON-escaped, replaced by
``[purged]`` (an atomic rewrite); archived bodies (content-addressed), space images
and other binary copies under runs, exports and the archive are deleted; the database
has its rows rewritten, then is vacuumed and its write-ahead log truncated, so no freed
page keeps the old text; a gzip file (a rotated journal) is inflated to look and, when
it holds the text, rewritten redacted. Anything else that holds it is named as left,
never skipped in silence. Nothing here follows a link, opens a fifo, or reads a file
whole past a bound; mount points and live runs' directories are not entered.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from impyard.common.fsutil import atomic_write_bytes, locked_append_file
from impyard.home import Home
from impyard.purge.selector import REDACTED

Action = Literal["redacted", "deleted", "left"]
#: The largest text file rewritten in memory; a larger one holding the text is left, named.
MAX_REWRITE_BYTES = 256 << 20
#: The most bytes of a compressed archived body inflated to look inside.
MAX_INFLATE_BYTES = 256 << 20
_CHUNK = 1 << 20
_DB_FILES = ("impyard.db", "impyard.db-wal", "impyard.db-shm")
#: Where a binary copy is deleted (Impyard's own copies), not left.
_COPIES = ("runs", "exports", "archive", "warm")


@dataclass(frozen=True)
class FileAction:
    path: str  # relative to the data root
    action: Action
    why: str


def patterns(value: str) -> list[bytes]:
    """The string as it appears in a file: raw, and JSON-escaped both ways."""
    forms = {value.encode(), json.dumps(value)[1:-1].encode()}
    forms.add(json.dumps(value, ensure_ascii=False)[1:-1].encode())
    return sorted(forms, key=len, reverse=True)


def sweep(home: Home, value: str, skip: Callable[[Path], bool], *, write: bool) -> list[FileAction]:
    """Every file under the data root holding ``value``, and what was (would be) done."""
    forms = patterns(value)
    actions: list[FileAction] = []
    db_hit = False
    for path, size in _files(home.root, skip):
        relative = str(path.relative_to(home.root))
        hit, kind = _holds(path, forms)
        if not hit:
            continue
        if path.name in _DB_FILES and path.parent == home.root:
            db_hit = True
            continue
        action, why = _act(path, relative, size, forms, kind=kind, write=write)
        actions.append(FileAction(relative, action, why))
    if db_hit:
        rows = scrub_database(home, value, write=write)
        actions.append(FileAction("impyard.db", "redacted", f"{rows} task row(s), vacuumed"))
    return actions


def _act(
    path: Path, relative: str, size: int, forms: list[bytes], *, kind: str, write: bool
) -> tuple[Action, str]:
    """What becomes of one file holding the text: ``kind`` is text, gzip or binary."""
    top = relative.split("/", 1)[0]
    if top == "archive" or path.name.endswith(".img") or kind == "binary":
        if top not in _COPIES and not relative.startswith("knowledge/"):
            return "left", "a binary file outside Impyard's copies: remove it by hand"
        if write:
            path.unlink()
        return "deleted", "a binary copy (a space image, an archived body, a layer file)"
    if size > MAX_REWRITE_BYTES:
        return "left", f"a file over {MAX_REWRITE_BYTES >> 20} MiB: redact it by hand"
    if write and not _redact(path, forms, gzipped=kind == "gzip"):
        return "left", f"inflates past {MAX_INFLATE_BYTES >> 20} MiB: redact it by hand"
    return "redacted", "every occurrence replaced by [purged]"


def _redact(path: Path, forms: list[bytes], *, gzipped: bool) -> bool:
    """Rewrite the file without the text, atomically, under the lock every appender takes
    (an append waiting on it goes to the new file, never the one replaced); False when a
    gzip file inflates past the bound (left as it is)."""
    with contextlib.suppress(FileNotFoundError), locked_append_file(path, create=False):
        with path.open("rb") as handle:
            data = b"".join(_inflated(handle)) if gzipped else handle.read()
        if gzipped and len(data) >= MAX_INFLATE_BYTES:
            return False
        for form in forms:
            data = data.replace(form, REDACTED)
        out = gzip.compress(data, mtime=0) if gzipped else data
        atomic_write_bytes(path, out, stat.S_IMODE(os.lstat(path).st_mode))
    return True


def scrub_database(home: Home, value: str, *, write: bool) -> int:
    """Task prompts and errors holding ``value``: rewritten, then the file vacuumed and
    its log truncated (a freed page would keep the old text). How many rows."""
    from impyard.queue.db import opened, transaction

    where = "instr(prompt, ?) > 0 OR instr(coalesce(error, ''), ?) > 0"
    with opened(home.db) as conn:
        rows = int(
            conn.execute(f"SELECT count(*) FROM tasks WHERE {where}", (value, value)).fetchone()[0]
        )
        if not write:
            return rows
        with transaction(conn):
            conn.execute(
                "UPDATE tasks SET prompt = replace(prompt, ?, '[purged]'),"
                f" error = replace(error, ?, '[purged]') WHERE {where}",
                (value, value, value, value),
            )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return rows


def _files(root: Path, skip: Callable[[Path], bool]) -> Iterator[tuple[Path, int]]:
    """Regular files under ``root``, never through a link or into a mount point, a Git
    repository (purged by rewriting) or a skipped directory, and no skipped file."""
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            found = list(entries)
        for entry in found:
            path = Path(entry.path)
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name.endswith(".git") or os.path.ismount(path) or skip(path):
                    continue
                stack.append(path)
            elif entry.is_file(follow_symlinks=False) and not skip(path):
                yield path, entry.stat(follow_symlinks=False).st_size


def _holds(path: Path, forms: list[bytes]) -> tuple[bool, str]:
    """Whether the file holds any form, read in chunks (a gzip file inflated, bounded),
    and what it is: ``gzip``, ``binary`` (a NUL in its first 8 KiB) or ``text``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False, "text"
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return False, "text"
        head = handle.read(8192)
        handle.seek(0)
        if head[:2] == b"\x1f\x8b":
            inflated = _found(_inflated(handle), forms)
            handle.seek(0)
            raw = _found(iter(lambda: handle.read(_CHUNK), b""), forms)
            return inflated or raw, "gzip"
        kind = "binary" if b"\0" in head else "text"
        return _found(iter(lambda: handle.read(_CHUNK), b""), forms), kind


def _found(chunks: Iterator[bytes], forms: list[bytes]) -> bool:
    keep = max(len(form) for form in forms) - 1
    tail = b""
    for chunk in chunks:
        window = tail + chunk
        if any(form in window for form in forms):
            return True
        tail = window[-keep:] if keep else b""
    return False


def _inflated(handle: BinaryIO) -> Iterator[bytes]:
    seen = 0
    try:
        with gzip.GzipFile(fileobj=handle) as body:
            while seen < MAX_INFLATE_BYTES and (chunk := body.read(_CHUNK)):
                seen += len(chunk)
                yield chunk
    except (OSError, EOFError, zlib.error):
        return
