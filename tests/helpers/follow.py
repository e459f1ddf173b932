"""A real ``impyard`` command that keeps printing (``journal -f``), read line by line as
its output arrives, each wait bounded by a deadline."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.helpers.git import GIT_ENV


def impyard_command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "impyard", "--home", str(home), *args]


def impyard_env() -> dict[str, str]:
    """The environment a spawned ``impyard`` gets: as the ``cli`` fixture's subprocesses."""
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    return env


class Follower:
    """``python -m impyard --home HOME *args`` with stdout read by a thread as it comes;
    a context manager that stops it on the way out."""

    def __init__(self, home: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            # Ctrl-C as a terminal's foreground job takes it: a runner started in the
            # background (SIGINT ignored, as a shell leaves it) would pass the ignore on.
            ["env", "--default-signal=INT", *impyard_command(home, *args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=impyard_env(),
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # end of output

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self._stderr.append(self.proc.stderr.read())

    def line(self, timeout: float = 30) -> str:
        """The next line it prints; fails when none comes within ``timeout`` seconds."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout} s") from None
        if line is None:
            raise AssertionError(f"output ended; stderr: {self.stop()[1]}")
        return line

    def lines(self, count: int, timeout: float = 30) -> list[str]:
        """The next ``count`` lines, all within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        return [self.line(max(0.0, deadline - time.monotonic())) for _ in range(count)]

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        """Send ``signum`` (once, if still running); its exit code and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return self.proc.returncode, "".join(self._stderr)

    def __enter__(self) -> Follower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()  # a test that failed midway leaves no follower behind
