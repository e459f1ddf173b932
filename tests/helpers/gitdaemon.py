"""A real ``git daemon`` on loopback that accepts pushes (``--enable=receive-pack``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.git import GIT_ENV


def daemon_available() -> bool:
    result = subprocess.run(["git", "daemon", "-h"], capture_output=True, text=True)
    return "usage: git daemon" in result.stdout + result.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """``git daemon`` serving ``base`` on loopback with pushes allowed; yields its base URL
    (``git://127.0.0.1:<port>/``). The daemon is killed on the way out, whatever happened."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            "--listen=127.0.0.1",
            f"--port={port}",
            f"--base-path={base}",
            str(base),
        ],
        env={"PATH": "/usr/bin:/bin", **GIT_ENV},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # `git daemon` runs git-daemon as its child (and that forks per connection): the
        # whole group goes, or the child would outlive the test still listening.
        start_new_session=True,
    )
    try:
        _wait_listening(port, proc)
        yield f"git://127.0.0.1:{port}/"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"git daemon exited with {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"git daemon did not listen on port {port}")
