"""One run's bodies on their way into the source archive, under its policy's limits.

A body over ``max_object_bytes``, a run past ``max_bytes_per_run`` new bytes
or an archive past ``max_total_bytes`` (policy ``[gateway.archive]``) still
reaches the box; it is just not stored, and the receipt names the limit. Once
a limit is passed the body is only hashed, not written; if the archive
already holds those bytes it counts as archived (a duplicate costs nothing).
A run is charged only for the bytes the archive grew by.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import BinaryIO

from impyard.gateway.provenance.archive import Archive, Stored, errno_text, unlink_quietly
from impyard.policy.models import GatewayArchive


class RunArchive:
    """One run's use of the archive: its policy's limits and the new bytes it stored."""

    def __init__(self, archive: Archive, limits: GatewayArchive) -> None:
        self.archive = archive
        self.limits = limits
        self._lock = threading.Lock()
        #: Bytes this run's bodies added (or, while they stream, are about to add).
        self.stored_bytes = 0

    def body(self, declared: int | None) -> ArchivedBody:
        return ArchivedBody(self, declared)

    def reserve(self, count: int) -> bool:
        with self._lock:
            if self.stored_bytes + count > self.limits.max_bytes_per_run:
                return False
            self.stored_bytes += count
            return True

    def release(self, count: int) -> None:
        with self._lock:
            self.stored_bytes -= count


class ArchivedBody:
    """One body on its way into the archive, fed piece by piece as it is relayed. It never
    raises: a body the archive cannot take still reaches the box."""

    def __init__(self, run: RunArchive, declared: int | None) -> None:
        self.run = run
        self.size = 0
        self.reserved = 0
        self.note: str | None = None
        self._file: BinaryIO | None = None
        self._temp: Path | None = None
        if declared is not None:
            self._check_declared(declared)

    def write(self, piece: bytes) -> None:
        if self.note is not None:
            return
        self.size += len(piece)
        if self.size > self.run.limits.max_object_bytes:
            self._abandon(_over("max_object_bytes", self.run.limits.max_object_bytes))
            return
        if self.size > self.reserved and not self._reserve(self.size - self.reserved):
            self._abandon(self.note)
            return
        try:
            if self._file is None:
                self._file, self._temp = self.run.archive.new_temp()
            self._file.write(piece)
        except OSError as exc:
            self._abandon(f"archive write failed: {errno_text(exc)}")

    def finish(self, sha256: str, complete: bool) -> Stored:
        """Store the body as ``sha256`` (its hash as relayed), unless it was cut short or
        a limit kept it out."""
        if not complete:
            self._abandon("body incomplete")
            return Stored(False, "body incomplete")
        if self.note is not None:
            self._abandon(self.note)
            try:
                if self.run.archive.refresh(sha256):
                    return Stored(True)
            except OSError:
                pass  # the limit's note says enough
            return Stored(False, self.note)
        try:
            if self._file is None:  # an empty body: nothing was written yet
                self._file, self._temp = self.run.archive.new_temp()
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as exc:
            note = f"archive write failed: {errno_text(exc)}"
            self._abandon(note)
            return Stored(False, note)
        assert self._temp is not None
        temp, self._temp = self._temp, None
        max_total = self.run.limits.max_total_bytes
        try:
            stored = self.run.archive.commit(temp, sha256, self.size, max_total)
        except OSError as exc:
            unlink_quietly(temp)
            stored = Stored(False, f"archive write failed: {errno_text(exc)}")
        # The run is charged for what the archive grew by: a body it already held is free.
        self.run.release(self.reserved - stored.added)
        self.reserved = 0
        return stored

    def _check_declared(self, declared: int) -> None:
        """Skip a body whose announced length is already over a limit (nothing written)."""
        limits = self.run.limits
        if declared > limits.max_object_bytes:
            self.note = _over("max_object_bytes", limits.max_object_bytes)
        elif self._reserve(declared) and self._archive_full(declared):
            self._abandon(_over("max_total_bytes", limits.max_total_bytes))

    def _reserve(self, count: int) -> bool:
        if self.run.reserve(count):
            self.reserved += count
            return True
        self.note = _over("max_bytes_per_run", self.run.limits.max_bytes_per_run)
        return False

    def _archive_full(self, adding: int) -> bool:
        try:
            return self.run.archive.total_bytes() + adding > self.run.limits.max_total_bytes
        except OSError:
            return False  # the commit checks again, and reports why

    def _abandon(self, note: str | None) -> None:
        self.note = note or self.note
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        if self._temp is not None:
            with contextlib.suppress(OSError):
                unlink_quietly(self._temp)
            self._temp = None
        self.run.release(self.reserved)
        self.reserved = 0


def _over(limit: str, value: int) -> str:
    return f"over gateway.archive.{limit} ({value} bytes)"
