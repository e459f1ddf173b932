"""The journal read from one position: its history up to there (all of it, or only the
newest events, read from the end of the live file first), then every line appended
after it, across rotations, each exactly once.

The position is the live file held open, how many rotations came before it, and how many
of its bytes are behind. A rotation (``impyard.retention.rotation``) renames the live
file to ``journal.<n>.jsonl`` with n one past the newest rotation, under the lock every
appender takes, and an appender that waited for that lock appends to the new file. So
once the name no longer points at the held file, that file takes no more lines: it is
read to its end, then whatever rotations came after it (read whole, when a follower
slept through more than one), then the new live file from its start.

A line is an event once its newline is there: a writer's line being appended is not
read until it is whole. A line that never ends (a host that died mid-append) is read
when its file is rotated, and skipped as unreadable, as ``journal.read_all`` skips it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from impyard.journal.log import read_rotated, rotated_numbers
from impyard.journal.query import JournalQuery

Entry = dict[str, Any]

_CHUNK = 1024 * 1024
_OPEN = os.O_RDONLY | os.O_CLOEXEC


def read_rotation(live: Path, number: int) -> list[Entry]:
    """Rotation ``number`` of the journal at ``live``, whichever form it has now; [] when
    there is none."""
    while True:
        path = rotated_numbers(live).get(number)
        if path is None:
            return []
        try:
            return read_rotated(path)
        except FileNotFoundError:
            continue  # compressed meanwhile: its plain file is gone, the listing has the other


class JournalTail:
    """The journal at ``live``: ``history`` once, then ``poll`` or ``follow``."""

    def __init__(self, live: Path) -> None:
        self.live = live
        self._offset = 0  # bytes of the held live file behind the position
        self._pending = b""  # the start of a line not yet ended, read past the offset
        self._rotations, self._fd = self._open_live()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JournalTail:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def history(self, query: JournalQuery, last: int | None = None) -> Iterator[Entry]:
        """The events matching ``query`` up to the live file's last whole line now, oldest
        first; the position moves there. With ``last``, only the newest ``last`` of them:
        the live file is read from its end, and rotated files, newest first, only while
        fewer have matched."""
        end = self._offset = self._complete_end()
        self._pending = b""
        if last is None:
            return self._everything(query, self._rotations, end)
        return iter(self._newest(query, end, last))

    def poll(self, query: JournalQuery) -> list[Entry]:
        """The events matching ``query`` appended since the position, oldest first; the
        position moves past them."""
        entries: list[Entry] = []
        if self._fd is None:
            self._reopen(entries)
        if self._fd is not None:
            self._read_on(entries, final=False)
            if self._moved():
                # Rotated: the held file takes no more lines, so its end is final.
                self._read_on(entries, final=True)
                self.close()
                if self._rotations + 1 in rotated_numbers(self.live):
                    self._rotations += 1
                self._reopen(entries)
                if self._fd is not None:
                    self._read_on(entries, final=False)
        return [entry for entry in entries if query.matches(entry)]

    def follow(
        self, query: JournalQuery, *, interval: float = 0.2, stop: threading.Event | None = None
    ) -> Iterator[Entry]:
        """``poll`` every ``interval`` seconds, each event as it comes, until ``stop``."""
        stop = stop or threading.Event()
        while not stop.is_set():
            yield from self.poll(query)
            stop.wait(interval)

    def _open_live(self) -> tuple[int, int | None]:
        """The live file opened (None while there is none) and the number of the newest
        rotation before it: the rotations listed before and after the open are the same,
        so none fell between."""
        while True:
            before = rotated_numbers(self.live)
            try:
                fd: int | None = os.open(self.live, _OPEN)
            except FileNotFoundError:
                fd = None
            if rotated_numbers(self.live).keys() == before.keys():
                return max(before, default=0), fd
            if fd is not None:
                os.close(fd)

    def _reopen(self, entries: list[Entry]) -> None:
        """Hold the live file again, after reading every rotation since the position."""
        newest, self._fd = self._open_live()
        for number in sorted(rotated_numbers(self.live)):
            if self._rotations < number <= newest:
                entries.extend(read_rotation(self.live, number))
        self._rotations, self._offset, self._pending = newest, 0, b""

    def _moved(self) -> bool:
        """Whether the name no longer points at the held file (renamed away by a rotation)."""
        assert self._fd is not None
        try:
            current = os.stat(self.live)
        except FileNotFoundError:
            return True
        held = os.fstat(self._fd)
        return (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino)

    def _read_on(self, entries: list[Entry], *, final: bool) -> None:
        """Read the held file from the offset to its end; whole lines become entries. With
        ``final`` the file takes no more lines, so a last line without an end is read too."""
        assert self._fd is not None
        while chunk := os.pread(self._fd, _CHUNK, self._offset):
            self._offset += len(chunk)
            data = self._pending + chunk
            cut = data.rfind(b"\n") + 1
            self._pending = data[cut:]
            entries.extend(_parse_lines(data[:cut]))
        if final:
            entries.extend(_parse_lines(self._pending))
            self._pending = b""

    def _complete_end(self) -> int:
        """Where the held file's last whole line ends now (0 without one)."""
        if self._fd is None:
            return 0
        stop = os.fstat(self._fd).st_size
        while stop > 0:
            start = max(0, stop - _CHUNK)
            cut = _pread(self._fd, start, stop).rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            stop = start
        return 0

    def _everything(self, query: JournalQuery, rotations: int, end: int) -> Iterator[Entry]:
        for number in sorted(rotated_numbers(self.live)):
            if number <= rotations:
                yield from (e for e in read_rotation(self.live, number) if query.matches(e))
        if self._fd is None:
            return
        start, tail = 0, b""
        while start < end:
            stop = min(end, start + _CHUNK)
            data = tail + _pread(self._fd, start, stop)
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            yield from (e for e in _parse_lines(data[:cut]) if query.matches(e))
            start = stop

    def _newest(self, query: JournalQuery, end: int, last: int) -> list[Entry]:
        found: list[Entry] = []  # newest first
        if last <= 0:
            return found
        if self._fd is not None:
            for line in _lines_backward(self._fd, end):
                entry = _parse(line)
                if entry is not None and query.matches(entry):
                    found.append(entry)
                    if len(found) == last:
                        return found[::-1]
        before = [n for n in rotated_numbers(self.live) if n <= self._rotations]
        for number in sorted(before, reverse=True):
            for entry in reversed(read_rotation(self.live, number)):
                if query.matches(entry):
                    found.append(entry)
                    if len(found) == last:
                        return found[::-1]
        return found[::-1]


def _pread(fd: int, start: int, stop: int) -> bytes:
    """Bytes ``start`` to ``stop`` of ``fd`` (fewer only at the end of the file)."""
    parts: list[bytes] = []
    while start < stop:
        chunk = os.pread(fd, stop - start, start)
        if not chunk:
            break
        parts.append(chunk)
        start += len(chunk)
    return b"".join(parts)


def _lines_backward(fd: int, end: int) -> Iterator[bytes]:
    """The lines of ``fd`` before ``end``, last first, read a chunk at a time."""
    tail = b""
    stop = end
    while stop > 0:
        start = max(0, stop - _CHUNK)
        lines = (_pread(fd, start, stop) + tail).split(b"\n")
        tail = lines[0]
        yield from reversed(lines[1:])
        stop = start
    yield tail


def _parse_lines(data: bytes) -> Iterator[Entry]:
    for line in data.split(b"\n"):
        entry = _parse(line)
        if entry is not None:
            yield entry


def _parse(line: bytes) -> Entry | None:
    """One journal line's event; None for a blank or unreadable line (as ``read_all``)."""
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
