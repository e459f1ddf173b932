"""Which process owns a run: an exclusive ``flock`` on ``runs/<id>/owner.lock``, held from
admission until the run is finished.

The kernel drops the lock when its holder dies (exit, crash, kill -9), so "the lock is
free" means exactly "no live process is driving this run". Recovery adopts only such
runs: a foreground ``impyard run`` still in its box is left alone by a ``serve`` started
beside it, instead of both waiting on and removing the same container. flock locks
belong to an open file description, so two runs driven by threads of one process
exclude each other too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from impyard.common.fsutil import lock_held
from impyard.home import Home


class RunOwnership:
    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def claim(cls, home: Home, run_id: str) -> RunOwnership | None:
        """Own the run, or None when a live process already does (never blocks)."""
        fd = os.open(
            home.run_owner_lock(run_id),
            os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
            0o600,
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    @staticmethod
    def is_held(home: Home, run_id: str) -> bool:
        """Whether a live process owns the run now. Only looks: creates no lock file (a run
        dir without one has no owner) and holds nothing afterwards."""
        try:
            fd = os.open(home.run_owner_lock(run_id), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        try:
            return lock_held(fd)
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the only descriptor releases the lock
            self._fd = None

    def __enter__(self) -> RunOwnership:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
