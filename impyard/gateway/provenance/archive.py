"""The opt-in source archive: relayed response bodies, stored once each by content.

``<home>/archive/sha256/<aa>/<rest>`` holds the bytes whose SHA-256 is
``<aa><rest>``, exactly as the upstream sent them (transfer coding removed,
content coding kept): what a fetch receipt's ``sha256`` names. A body is
written to ``archive/tmp/`` while it is relayed (never held in memory),
fsynced and renamed into place. A body already stored is not stored twice:
its temp file is dropped and the object's mtime refreshed, since retention
counts from the last time any run fetched it.

``archive/total_bytes`` keeps the archive's size, so a store need not walk
it. It is raised before an object is renamed in, so a crash can only leave it
too high (refusing early, never storing past the limit); ``prune`` and
``recount`` set it right, and a missing or torn file is recounted.

What one run may store, and how a body streams in, is ``archive_intake``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from impyard.common.errors import NotFoundError, UsageError
from impyard.common.fsutil import atomic_write_text, fsync_dir, locked

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_OBJECTS = "sha256"
_TMP = "tmp"
_TOTAL = "total_bytes"
_LOCK = ".lock"
_DAY = 86400.0
# A temp file untouched this long belongs to a host that died mid-body.
_STALE_TMP_SECONDS = _DAY


@dataclass(frozen=True)
class Stored:
    """Whether a body is in the archive, and if not, why (for the receipt)."""

    archived: bool
    note: str | None = None
    #: Bytes the archive grew by (0 for a body it already held).
    added: int = 0


@dataclass(frozen=True)
class PruneReport:
    removed: int
    removed_bytes: int
    kept: int
    kept_bytes: int
    #: The SHA-256 of every object removed (gc journals each).
    removed_objects: tuple[str, ...] = ()


@dataclass(frozen=True)
class ArchivedObject:
    sha256: str
    path: Path
    size: int
    mtime: float


def check_sha256(value: str) -> str:
    """A SHA-256 as 64 hex digits (any case in, lowercase out); UsageError otherwise."""
    digest = value.strip().lower()
    if not SHA256_HEX.fullmatch(digest):
        raise UsageError(f"{value[:80]!r} is not a SHA-256 (64 hex digits)")
    return digest


class Archive:
    """The archive of one data root (shared by every run and host process)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def objects_dir(self) -> Path:
        return self.root / _OBJECTS

    @property
    def tmp_dir(self) -> Path:
        return self.root / _TMP

    @property
    def total_file(self) -> Path:
        return self.root / _TOTAL

    def object_path(self, sha256: str) -> Path:
        digest = check_sha256(sha256)
        return self.objects_dir / digest[:2] / digest[2:]

    def open(self, sha256: str) -> BinaryIO:
        """The stored body named ``sha256``, for reading; NotFoundError when it is absent."""
        path = self.object_path(sha256)
        try:
            return path.open("rb")
        except FileNotFoundError:
            digest = path.parent.name + path.name
            raise NotFoundError(f"no archived body {digest} in {self.root}") from None

    def total_bytes(self) -> int:
        with self._locked():
            return self._total()

    def new_temp(self) -> tuple[BinaryIO, Path]:
        """An open temp file on the archive's filesystem (so it can be renamed into place)."""
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="body-", dir=self.tmp_dir)
        return os.fdopen(fd, "wb"), Path(name)

    def commit(self, temp: Path, sha256: str, size: int, max_total: int) -> Stored:
        """Move a fully written, fsynced ``temp`` into place as ``sha256`` (or drop it: a
        duplicate, or the archive is full)."""
        final = self.object_path(sha256)
        with self._locked():
            if final.exists():
                unlink_quietly(temp)
                with contextlib.suppress(OSError):
                    os.utime(final)
                return Stored(True)
            total = self._total()
            if total + size > max_total:
                unlink_quietly(temp)
                return Stored(False, f"over gateway.archive.max_total_bytes ({max_total} bytes)")
            atomic_write_text(self.total_file, f"{total + size}\n")
            try:
                _make_dirs(final.parent, self.root)
                os.rename(temp, final)
                fsync_dir(final.parent)
            except OSError as exc:
                unlink_quietly(temp)
                with contextlib.suppress(OSError):
                    atomic_write_text(self.total_file, f"{total}\n")
                return Stored(False, f"archive write failed: {errno_text(exc)}")
        return Stored(True, added=size)

    def refresh(self, sha256: str) -> bool:
        """True if ``sha256`` is stored, its age now reset: a body a limit kept out of the
        temp file is archived all the same when the archive already holds its bytes."""
        final = self.object_path(sha256)
        with self._locked():
            if not final.exists():
                return False
            with contextlib.suppress(OSError):
                os.utime(final)
            return True

    def recount(self) -> int:
        """Walk the archive, write its real size to ``total_bytes`` and return it."""
        with self._locked():
            return self._recount()

    def prune(self, retention_days: int, *, now: float | None = None) -> PruneReport:
        """Delete objects not stored for ``retention_days`` (and temp files a dead host
        left), then recount. What ``impyard gc`` runs for policy ``retention_days``."""
        now = time.time() if now is None else now
        cutoff = now - retention_days * _DAY
        removed = removed_bytes = kept = kept_bytes = 0
        gone: list[str] = []
        with self._locked():
            for path, stat in _objects(self.objects_dir):
                if stat.st_mtime < cutoff:
                    unlink_quietly(path)
                    removed += 1
                    removed_bytes += stat.st_size
                    gone.append(path.parent.name + path.name)
                else:
                    kept += 1
                    kept_bytes += stat.st_size
            _remove_empty_fanout(self.objects_dir)
            for path, stat in _files(self.tmp_dir):
                if stat.st_mtime < now - _STALE_TMP_SECONDS:
                    unlink_quietly(path)
            atomic_write_text(self.total_file, f"{kept_bytes}\n")
        return PruneReport(removed, removed_bytes, kept, kept_bytes, tuple(gone))

    def stale(self, retention_days: int, *, now: float | None = None) -> list[ArchivedObject]:
        """The objects ``prune`` would delete now (a dry run); deletes nothing."""
        now = time.time() if now is None else now
        cutoff = now - retention_days * _DAY
        return [
            ArchivedObject(path.parent.name + path.name, path, stat.st_size, stat.st_mtime)
            for path, stat in sorted(_objects(self.objects_dir), key=lambda found: found[0])
            if stat.st_mtime < cutoff
        ]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root / _LOCK):
            yield

    def _total(self) -> int:
        try:
            return int(self.total_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return self._recount()

    def _recount(self) -> int:
        total = sum(stat.st_size for _path, stat in _objects(self.objects_dir))
        atomic_write_text(self.total_file, f"{total}\n")
        return total


def errno_text(exc: OSError) -> str:
    """Why a write failed, for a receipt's note."""
    return exc.strerror or type(exc).__name__


def unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _make_dirs(path: Path, root: Path) -> None:
    """Create ``path`` and any missing parents below ``root``, each made durable in its
    parent: a renamed-in object must not vanish with a directory the disk never saw."""
    missing: list[Path] = []
    node = path
    while node != root and not node.is_dir():
        missing.append(node)
        node = node.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
        fsync_dir(directory.parent)


def _files(directory: Path) -> Iterator[tuple[Path, os.stat_result]]:
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                yield Path(entry.path), entry.stat(follow_symlinks=False)


def _objects(objects_dir: Path) -> Iterator[tuple[Path, os.stat_result]]:
    try:
        fanout = [e for e in os.scandir(objects_dir) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    for directory in fanout:
        yield from _files(Path(directory.path))


def _remove_empty_fanout(objects_dir: Path) -> None:
    try:
        entries = list(os.scandir(objects_dir))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError):  # not empty: kept
                os.rmdir(entry.path)
