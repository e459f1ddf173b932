"""Where the running console listens, recorded in the data root (``web-console.json``), so
``impyard web --print-url`` prints a login URL that works: a console started with
``--listen 127.0.0.1:18470`` (or ``serve --web``) is not on the default port.

The record holds the console's base URL and pid, never the token. Its process holds an
exclusive ``flock`` on it while the console listens; the kernel drops the lock however
the process dies, so a record whose lock is free is stale and ignored. It is written
locked under a temporary name and renamed into place, so it is never seen unlocked while
its console lives. The console started last wins; each removes the record only while it
is still its own (uvicorn ends the process by the signal it caught, so a console stopped
by SIGTERM leaves its record, unlocked, for the next one to replace).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Any

from impyard.common.fsutil import lock_held
from impyard.home import Home
from impyard.web.access.listen import Listen

#: Bytes of the record read back: a URL and a pid.
MAX_RECORD_BYTES = 4096


class ConsoleRecord:
    """This process's console, recorded until ``close``."""

    def __init__(self, home: Home, listen: Listen) -> None:
        self._path = home.web_console
        temp = home.root / f".web-console.{os.getpid()}.tmp"
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
        self._fd = os.open(temp, flags, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            body = {"url": listen.url, "pid": os.getpid()}
            os.write(self._fd, (json.dumps(body, sort_keys=True) + "\n").encode())
            os.rename(temp, self._path)  # the lock belongs to the inode and moves with it
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            os.close(self._fd)
            raise

    def close(self) -> None:
        """Remove the record (if a later console has not replaced it), then the lock."""
        with contextlib.suppress(OSError):
            if os.stat(self._path, follow_symlinks=False).st_ino == os.fstat(self._fd).st_ino:
                os.unlink(self._path)  # before the lock goes: no reader sees it unlocked
        os.close(self._fd)


def running_console_url(home: Home) -> str | None:
    """The base URL of the console running on this data root, or None (none runs, or its
    record was left by a console that died)."""
    try:
        fd = os.open(home.web_console, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not lock_held(fd):
            return None
        raw = os.read(fd, MAX_RECORD_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        body: Any = json.loads(raw)
    except ValueError:
        return None
    url = body.get("url") if isinstance(body, dict) else None
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    return url
