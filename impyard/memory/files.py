"""Where an imp's memory lives on disk, and the locked, durable ways to touch it.

Every writer (add, forget, migrate) holds an exclusive flock on a separate lock
file, ``memory/.<imp>.lock``, never on the data file itself: ``forget`` replaces
the data file by rename, and a writer blocked on the old inode's lock would then
append to an unlinked file and lose its line. Readers hold a shared lock on the
same file so they never see a half-written line of a live writer.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from impyard.common.fsutil import atomic_write_bytes, fsync_dir
from impyard.home import Home
from impyard.memory.entry import MemoryEntry, entry_from_record


@contextlib.contextmanager
def _flock(path: Path, operation: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def write_lock(home: Home, imp: str) -> Iterator[None]:
    home.memory_dir.mkdir(parents=True, exist_ok=True)
    with _flock(home.memory_lock(imp), fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def read_lock(home: Home, imp: str) -> Iterator[None]:
    # Reading must not create the data root: without memory/ there is no writer to wait for.
    if not home.memory_dir.is_dir():
        yield
        return
    with _flock(home.memory_lock(imp), fcntl.LOCK_SH):
        yield


@dataclass(frozen=True)
class Line:
    """One non-blank stored line: its 1-based number, bytes, and entry or failure reason."""

    number: int
    raw: bytes
    entry: MemoryEntry | None
    problem: str | None

    @property
    def key(self) -> str | bytes:
        """What makes two lines the same entry: its id, or its bytes when unreadable."""
        return self.entry.id if self.entry is not None else self.raw.strip()


def read_lines(path: Path, imp: str) -> list[Line]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    chunks = data.split(b"\n")
    torn_tail = not data.endswith(b"\n")
    lines: list[Line] = []
    for number, raw in enumerate(chunks, start=1):
        if not raw.strip():
            continue
        entry, problem = _parse(raw, imp)
        if problem is not None and torn_tail and number == len(chunks):
            problem = f"truncated last line, likely a crash mid-write: {problem}"
        lines.append(Line(number, raw, entry, problem))
    return lines


def _parse(raw: bytes, imp: str) -> tuple[MemoryEntry | None, str | None]:
    try:
        value = json.loads(raw)
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg}"
    if not isinstance(value, dict):
        return None, "not a JSON object"
    entry = entry_from_record(value, raw, imp)
    if isinstance(entry, str):
        return None, entry
    return entry, None


def append_line(path: Path, line: bytes) -> None:
    """Append one line and fsync. Call with the write lock held.

    A file whose last byte is not a newline ends in a torn line from a crashed
    writer; start on a fresh line so the new entry is not glued onto the debris.
    """
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        data = line + b"\n"
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def rewrite_lines(path: Path, lines: list[Line]) -> None:
    """Replace ``path`` with exactly ``lines``, verbatim and atomically; hold the write lock."""
    atomic_write_bytes(path, b"".join(line.raw + b"\n" for line in lines))


def encode_entry(entry: MemoryEntry) -> bytes:
    # ensure_ascii=False keeps non-English text near its real size on disk.
    return json.dumps(entry.to_json(), ensure_ascii=False, separators=(",", ":")).encode()


def remove_file(path: Path) -> None:
    path.unlink()
    fsync_dir(path.parent)
