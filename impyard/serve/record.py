"""Which ``impyard serve`` processes are alive on a data root: ``serve/<pid>.json``.

Each serve writes its record (pid, start time, concurrency) and holds an exclusive
``flock`` on it for its whole life. The kernel drops the lock when the process dies
however it dies, so a record whose lock is free was left by a dead serve: readers tell
a live serve from a stale file without trusting pids, which get reused.

The record is written and locked under a hidden temporary name, then renamed into
place, so a ``<pid>.json`` is never seen unlocked while its serve lives; that makes it
safe for a starting serve to delete every unlocked record it finds. Readers only probe
with a shared, non-blocking lock, and the serve takes its own lock blocking, so a probe
can never make a serve fail to start.

One serve per data root: it holds the queue (claims, endings, recovery of the runs a
dead serve left), so a second one is refused, naming the first, before it does anything.
``serve/lock`` decides, flocked exclusively and without waiting for the serve's whole
life; no reader touches it, and a dead serve's lock is gone with its process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impyard import __version__
from impyard.common.errors import ImpyardError
from impyard.common.fsutil import lock_held
from impyard.common.names import utc_now
from impyard.home import Home

#: A hidden temporary record older than this whose lock is free was left by a serve
#: that died while starting; younger ones may belong to a serve starting right now.
STALE_TEMP_SECONDS = 600.0


@dataclass(frozen=True)
class ServeRecord:
    """A serve as it recorded itself, and whether it is still alive."""

    pid: int
    started_at: str | None
    concurrency: int | None
    once: bool
    version: str | None
    alive: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ServeRunningError(ImpyardError):
    """Another serve is live on the data root; ``pid`` None while it is still starting."""

    def __init__(self, root: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "starting now"
        super().__init__(
            f"another impyard serve ({who}) is running on the data root {root} and holds "
            "its queue: stop it first, or give this one another --home"
        )
        self.pid = pid


@contextlib.contextmanager
def sole_serve(home: Home) -> Iterator[None]:
    """Be the data root's one serve until the block ends; ServeRunningError when another
    live serve is."""
    home.serve_dir.mkdir(exist_ok=True)
    fd = os.open(home.serve_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            live = [record.pid for record in read_records(home) if record.alive]
            raise ServeRunningError(home.root, live[0] if live else None) from None
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor


@contextlib.contextmanager
def recorded(home: Home, concurrency: int, *, once: bool) -> Iterator[Path]:
    """Record this process as a live serve until the block ends (the record is removed)."""
    home.serve_dir.mkdir(exist_ok=True)
    _remove_stale(home.serve_dir)
    pid = os.getpid()
    final = home.serve_record(pid)
    temp = home.serve_dir / f".{pid}.json.tmp"
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a reader's brief probe must not fail us
        body = {
            "pid": pid,
            "started_at": utc_now(),
            "concurrency": concurrency,
            "once": once,
            "version": __version__,
        }
        os.write(fd, (json.dumps(body, sort_keys=True) + "\n").encode())
        os.rename(temp, final)  # the lock belongs to the inode and moves with it
        try:
            yield final
        finally:
            with contextlib.suppress(OSError):
                os.unlink(final)  # before the lock goes: no reader sees it unlocked
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)  # only there if the rename never happened
        os.close(fd)


def read_records(home: Home) -> list[ServeRecord]:
    """Every serve record on the data root, live ones first, then stale ones by pid."""
    if not home.serve_dir.is_dir():
        return []
    found: list[ServeRecord] = []
    with os.scandir(home.serve_dir) as entries:
        for entry in entries:
            pid = _pid_of(entry.name)
            if pid is None:
                continue
            record = _read(Path(entry.path), pid)
            if record is not None:
                found.append(record)
    return sorted(found, key=lambda r: (not r.alive, r.pid))


def _pid_of(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    if not dot or ext != "json" or not stem.isdigit():
        return None
    return int(stem)


def _read(path: Path, pid: int) -> ServeRecord | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None  # removed since the listing: that serve just stopped
    try:
        alive = lock_held(fd)
        raw = os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    started, concurrency = body.get("started_at"), body.get("concurrency")
    version = body.get("version")
    return ServeRecord(
        pid=pid,
        started_at=started if isinstance(started, str) else None,
        concurrency=concurrency if isinstance(concurrency, int) else None,
        once=body.get("once") is True,
        version=version if isinstance(version, str) else None,
        alive=alive,
    )


def _remove_stale(directory: Path) -> None:
    """Delete records of dead serves (a crashed serve cannot remove its own)."""
    now = time.time()
    with os.scandir(directory) as entries:
        for entry in entries:
            temp = entry.name.startswith(".") and entry.name.endswith(".json.tmp")
            if _pid_of(entry.name) is None and not temp:
                continue
            with contextlib.suppress(OSError):
                if temp and now - entry.stat(follow_symlinks=False).st_mtime < STALE_TEMP_SECONDS:
                    continue
                fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.unlink(entry.path)
                except BlockingIOError:
                    pass  # a live serve's (or a reader probing it right now)
                finally:
                    os.close(fd)
