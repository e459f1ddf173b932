"""A box's output on disk while it runs, readable live by any process, bounded like
the final ``box.log``.

The writer keeps what ``box.log`` has always kept, the first ``head`` bytes and the last
``tail`` bytes with a one-line marker between, and makes the part a follower needs live:

- ``box.log`` receives the head as it arrives;
- past the head, the output goes to numbered segment files in ``box.live/`` (segment
  ``k`` holds stream bytes ``head + k*segment`` up to the next segment); the oldest
  are unlinked once the rest cover the tail, so the disk holds at most
  ``head + tail + segment`` bytes at any time, however much the box prints;
- when the box is done the marker and the tail are appended to ``box.log`` (its final
  form, as before), then ``box.live/end.json`` records where each part lies in it, and
  only then are the segments removed.

A reader tracks its position in the box's stream (not in any one file), so it reads the
head, then the segments, then, once the log has ended, the rest from the final
``box.log``. A reader that falls behind the kept tail skips ahead and says how much it
skipped; it never prints a byte twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

from impyard.common.fsutil import atomic_write_json, remove_tree

HEAD_BYTES = 2 * 1024 * 1024
TAIL_BYTES = 6 * 1024 * 1024
SEGMENT_BYTES = 1024 * 1024
LOG_CAP_BYTES = HEAD_BYTES + TAIL_BYTES
MARKER = (
    "\n[impyard: {omitted} bytes of box output omitted here; "
    "the first {head} and the last {tail} bytes are kept]\n"
)
SKIP_MARKER = "\n[impyard: {skipped} bytes of box output skipped: the reader fell behind]\n"
#: The most one read hands back, so a reader far behind streams instead of loading
#: the whole log at once.
READ_BYTES = 1024 * 1024

_LAYOUT = "layout.json"
_END = "end.json"
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def live_dir(log_path: Path) -> Path:
    """The live directory beside ``box.log``."""
    return log_path.with_name(log_path.name.removesuffix(".log") + ".live")


@dataclass(frozen=True)
class Layout:
    head: int
    tail: int
    segment: int


@dataclass(frozen=True)
class Ending:
    """Where the parts of the stream lie in the final ``box.log``."""

    seen: int  # every byte the box printed that reached the writer
    head: int  # box.log[:head] is the stream's first ``head`` bytes
    marker: int  # then this many bytes of marker (0 when nothing was left out)
    tail: int  # then the stream's last ``tail`` bytes


@dataclass(frozen=True)
class KeptLog:
    seen_bytes: int  # everything the box printed that reached us
    kept_bytes: int  # what box.log holds, the marker aside
    truncated: bool


class HeadTailWriter:
    """Writes a box's output as it arrives: the head into ``path``, the rest into
    segments that a reader can follow; ``close`` gives ``path`` its final form."""

    def __init__(
        self,
        path: Path,
        head: int = HEAD_BYTES,
        tail: int = TAIL_BYTES,
        segment: int = SEGMENT_BYTES,
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._live = live_dir(path)
        # A copy made again after a crash starts the log over: no stale segment survives.
        remove_tree(self._live)
        self._live.mkdir()
        self._layout = Layout(head=head, tail=tail, segment=segment)
        atomic_write_json(self._live / _LAYOUT, asdict(self._layout), durable=False)
        self._out = path.open("wb")
        self._seen = 0
        self._head_written = 0
        self._tail_written = 0  # stream bytes past the head, all of them
        self._segment_fd: int | None = None
        self._segment_index = -1
        self._oldest_kept = 0

    def write(self, chunk: bytes) -> None:
        self._seen += len(chunk)
        head_left = self._layout.head - self._head_written
        if head_left > 0:
            part = chunk[:head_left]
            self._out.write(part)
            self._out.flush()
            self._head_written += len(part)
            chunk = chunk[len(part) :]
        view = memoryview(chunk)
        while view:
            written = self._write_segment(view)
            view = view[written:]
        self._drop_old_segments()

    def _write_segment(self, data: memoryview) -> int:
        size = self._layout.segment
        index, within = divmod(self._tail_written, size)
        if index != self._segment_index:
            self._close_segment()
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            self._segment_fd = os.open(self._live / _segment_name(index), flags, 0o644)
            self._segment_index = index
        assert self._segment_fd is not None
        written = os.write(self._segment_fd, data[: size - within])
        self._tail_written += written
        return written

    def _close_segment(self) -> None:
        if self._segment_fd is not None:
            os.close(self._segment_fd)
            self._segment_fd = None

    def _drop_old_segments(self) -> None:
        """Unlink the segments the newest ``tail`` bytes no longer reach."""
        size = self._layout.segment
        needed_from = max(0, self._tail_written - self._layout.tail) // size
        while self._oldest_kept < needed_from:
            (self._live / _segment_name(self._oldest_kept)).unlink(missing_ok=True)
            self._oldest_kept += 1

    def _tail_pieces(self, length: int) -> Iterator[bytes]:
        """The last ``length`` stream bytes, read back from the segments."""
        size = self._layout.segment
        position = self._tail_written - length
        while position < self._tail_written:
            index, within = divmod(position, size)
            want = min(size - within, self._tail_written - position)
            data = _read_at(self._live / _segment_name(index), within, want)
            if not data:
                raise OSError(f"box log segment {index} is shorter than written")
            position += len(data)
            yield data

    def close(self) -> KeptLog:
        self._close_segment()
        tail = min(self._tail_written, self._layout.tail)
        omitted = self._seen - self._head_written - tail
        marker = b""
        if omitted > 0:
            text = MARKER.format(omitted=omitted, head=self._head_written, tail=tail)
            marker = text.encode()
            self._out.write(marker)
        for piece in self._tail_pieces(tail):
            self._out.write(piece)
        self._out.close()
        ending = Ending(seen=self._seen, head=self._head_written, marker=len(marker), tail=tail)
        # Recorded before the segments go: a reader that finds one missing looks here first.
        atomic_write_json(self._live / _END, asdict(ending), durable=False)
        for index in range(self._oldest_kept, self._segment_index + 1):
            (self._live / _segment_name(index)).unlink(missing_ok=True)
        kept = self._head_written + tail
        return KeptLog(seen_bytes=self._seen, kept_bytes=kept, truncated=omitted > 0)


_Record = TypeVar("_Record", Layout, Ending)


class LogReader:
    """Follows one box's output by its position in the stream; ``read`` returns what is
    new since the last call, ``ended`` turns true once the whole log was handed out."""

    def __init__(self, log_path: Path) -> None:
        self._path = log_path
        self._live = live_dir(log_path)
        self.position = 0
        self.ended = False

    def read(self) -> list[bytes]:
        if self.ended:
            return []
        ending = _read_json(self._live / _END, Ending)
        if ending is not None:
            return self._read_final(ending)
        layout = _read_json(self._live / _LAYOUT, Layout)
        if layout is None:
            return []
        return self._read_live(layout)

    def started(self) -> bool:
        """A writer began this log (its live directory exists)."""
        return self._live.exists()

    def legacy(self) -> bool:
        """The log was written without a live directory (a run from before it existed)."""
        return not self._live.exists() and self._path.exists()

    def read_whole(self) -> Iterator[bytes]:
        """A log with no live directory, from the reader's position to its end."""
        while data := _read_at(self._path, self.position, READ_BYTES):
            self.position += len(data)
            yield data
        self.ended = True

    def _read_live(self, layout: Layout) -> list[bytes]:
        out: list[bytes] = []
        if self.position < layout.head:
            data = _read_at(self._path, self.position, layout.head - self.position)
            self._take(out, data)
            if self.position < layout.head:
                return out
        budget = READ_BYTES
        while budget > 0:
            index, within = divmod(self.position - layout.head, layout.segment)
            try:
                fd = os.open(self._live / _segment_name(index), _OPEN_FLAGS)
            except FileNotFoundError:
                return out + self._after_missing(layout, index)
            try:
                data = os.pread(fd, min(budget, layout.segment - within), within)
            finally:
                os.close(fd)
            if not data:
                return out
            self._take(out, data)
            budget -= len(data)
        return out

    def _after_missing(self, layout: Layout, index: int) -> list[bytes]:
        """Segment ``index`` is not there: the log ended, the reader fell behind the kept
        tail (its oldest kept segment is later), or nothing new was written yet."""
        ending = _read_json(self._live / _END, Ending)
        if ending is not None:
            return self._read_final(ending)
        oldest = _oldest_segment(self._live)
        if oldest is None or oldest <= index:
            return []
        skipped = (oldest - index) * layout.segment - (self.position - layout.head) % (
            layout.segment
        )
        self.position += skipped
        return [SKIP_MARKER.format(skipped=skipped).encode()]

    def _read_final(self, ending: Ending) -> list[bytes]:
        """The rest of the stream from the final ``box.log`` (bounded per call)."""
        out: list[bytes] = []
        if self.position < ending.head:
            want = min(ending.head - self.position, READ_BYTES)
            self._take(out, _read_at(self._path, self.position, want))
            return out
        tail_start = ending.seen - ending.tail
        if self.position < tail_start:
            if self.position == ending.head and ending.marker:
                out.append(_read_at(self._path, ending.head, ending.marker))
            else:
                skipped = tail_start - self.position
                out.append(SKIP_MARKER.format(skipped=skipped).encode())
            self.position = tail_start
        offset = ending.head + ending.marker + (self.position - tail_start)
        data = _read_at(self._path, offset, min(ending.seen - self.position, READ_BYTES))
        self._take(out, data)
        if self.position >= ending.seen or not data:
            self.ended = True
        return out

    def _take(self, out: list[bytes], data: bytes) -> None:
        if data:
            out.append(data)
            self.position += len(data)


def _segment_name(index: int) -> str:
    return f"{index:08d}.seg"


def _oldest_segment(live: Path) -> int | None:
    try:
        names = os.listdir(live)
    except FileNotFoundError:
        return None
    numbers = [int(n[:-4]) for n in names if n.endswith(".seg") and n[:-4].isdigit()]
    return min(numbers, default=None)


def _read_at(path: Path, offset: int, length: int) -> bytes:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def _read_json(path: Path, kind: type[_Record]) -> _Record | None:
    """A small record the writer made (never a box): None while it is not there yet."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    try:
        raw = os.read(fd, 4096)
    finally:
        os.close(fd)
    data = json.loads(raw)
    return kind(**{key: int(data[key]) for key in kind.__dataclass_fields__})
