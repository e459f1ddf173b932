"""A box's output, kept as evidence and readable live: the head and the tail, bounded,
with a marker between (the format and its live form: ``impyard.box.watch.livelog``).

The engine's own copy (json-file, itself capped so a chatty box cannot fill the
engine's disk) rotates: it drops the *beginning* once the box has printed more than
its cap, and the beginning is usually what explains a failure. So the output is
attached to before the box starts and written as it arrives. A run re-attached after a
host crash can only copy what the engine still has; the same bounds apply.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path

from impyard.box.docker import engine, taskexits
from impyard.box.docker.engine import call
from impyard.box.docker.enginehttp import RawStream
from impyard.box.watch.livelog import (
    HEAD_BYTES,
    LOG_CAP_BYTES,
    MARKER,
    TAIL_BYTES,
    HeadTailWriter,
    KeptLog,
)

__all__ = ["HEAD_BYTES", "LOG_CAP_BYTES", "MARKER", "TAIL_BYTES", "KeptLog", "LogFollower"]

log = logging.getLogger(__name__)

#: After the box exited, how long the follower may take to drain what is left.
DRAIN_SECONDS = 30.0


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
        """Attach to a created box (call before ``start``) and begin reading; and watch
        containerd's exits (``taskexits``) from here on, so the box's end is seen early."""
        taskexits.watch()
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
