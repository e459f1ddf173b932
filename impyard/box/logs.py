"""A box's output, kept as evidence: the head and the tail, bounded, with a marker between.

The engine's own copy (json-file, itself capped so a chatty box cannot fill the
engine's disk) rotates: it drops the *beginning* once the box has printed more than
its cap, and the beginning is usually what explains a failure. So the output is
attached to before the box starts: the first ``HEAD_BYTES`` go to ``box.log``
as they arrive, the last ``TAIL_BYTES`` are kept in memory, and when the box is done
a one-line marker says how much was left out between them. A run re-attached after a
host crash can only copy what the engine still has; the same bounds apply.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from impyard.box import engine
from impyard.box.engine import call
from impyard.box.enginehttp import RawStream

log = logging.getLogger(__name__)

HEAD_BYTES = 2 * 1024 * 1024
TAIL_BYTES = 6 * 1024 * 1024
LOG_CAP_BYTES = HEAD_BYTES + TAIL_BYTES
MARKER = (
    "\n[impyard: {omitted} bytes of box output omitted here; "
    "the first {head} and the last {tail} bytes are kept]\n"
)
#: After the box exited, how long the follower may take to drain what is left.
DRAIN_SECONDS = 30.0


@dataclass(frozen=True)
class KeptLog:
    seen_bytes: int  # everything the box printed that reached us
    kept_bytes: int  # what box.log holds, the marker aside
    truncated: bool


class HeadTailWriter:
    """Writes the head to ``path`` as it arrives; the tail waits in memory for ``close``."""

    def __init__(self, path: Path, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._out = path.open("wb")
        self._head_left = head
        self._tail_cap = tail
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self._seen = 0
        self._head_written = 0

    def write(self, chunk: bytes) -> None:
        self._seen += len(chunk)
        if self._head_left > 0:
            part = chunk[: self._head_left]
            self._out.write(part)
            self._out.flush()
            self._head_left -= len(part)
            self._head_written += len(part)
            chunk = chunk[len(part) :]
        if not chunk:
            return
        self._tail.append(chunk)
        self._tail_bytes += len(chunk)
        while self._tail_bytes - len(self._tail[0]) >= self._tail_cap:
            self._tail_bytes -= len(self._tail.popleft())

    def close(self) -> KeptLog:
        tail = b"".join(self._tail)[-self._tail_cap :] if self._tail else b""
        omitted = self._seen - self._head_written - len(tail)
        if omitted > 0:
            marker = MARKER.format(omitted=omitted, head=self._head_written, tail=len(tail))
            self._out.write(marker.encode())
        self._out.write(tail)
        self._out.close()
        kept = self._head_written + len(tail)
        return KeptLog(seen_bytes=self._seen, kept_bytes=kept, truncated=omitted > 0)


def copy_logs(container_id: str, log_path: Path) -> KeptLog:
    """What the engine still holds of a box that already exited (head and tail bounded)."""
    writer = HeadTailWriter(log_path)
    try:
        call("logs", _copy, container_id, writer, container_id=container_id)
    finally:
        kept = writer.close()
    return kept


def _copy(container_id: str, writer: HeadTailWriter) -> None:
    for chunk in engine.api().logs(container_id):
        writer.write(chunk)


class LogFollower:
    """A box's output, live from its first byte: attached before the box starts.

    The engine's log *follow* reads its rotating json files and, on engine 20.10,
    duplicates or drops output across a rotation; the attach stream is the output
    itself, before any log driver. A slow reader slows the box's writes, never loses
    them.
    """

    def __init__(self, container_id: str, log_path: Path) -> None:
        self._container_id = container_id
        self._log_path = log_path
        self._stream: RawStream | None = None
        self._kept: KeptLog | None = None
        self._failed: str | None = None
        self._thread = threading.Thread(target=self._follow, name="box-logs", daemon=True)

    @classmethod
    def attach(cls, container_id: str, log_path: Path) -> LogFollower:
        """Attach to a created box (call before ``start``) and begin reading."""
        follower = cls(container_id, log_path)
        follower._stream = call(
            "attach", engine.api().attach, container_id, container_id=container_id
        )
        follower._thread.start()
        return follower

    def _follow(self) -> None:
        writer: HeadTailWriter | None = None
        try:
            writer = HeadTailWriter(self._log_path)
            assert self._stream is not None, "attached before the thread starts"
            for data in self._stream.frames():
                writer.write(data)
        except Exception as exc:  # the post-exit copy takes over
            self._failed = f"{type(exc).__name__}: {exc}"
        finally:
            self.close()
            if writer is not None:
                kept = writer.close()
                if self._failed is None:
                    self._kept = kept

    def close(self) -> None:
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream.close()

    def finish(self) -> KeptLog | None:
        """After the box exited: the kept log, or None when following failed."""
        self._thread.join(DRAIN_SECONDS)
        if self._thread.is_alive():
            self.close()
            self._thread.join(5)
            log.warning("box %s: log follower did not finish", self._container_id[:12])
            return None
        if self._failed is not None:
            log.warning("box %s: following logs failed: %s", self._container_id[:12], self._failed)
        return self._kept
