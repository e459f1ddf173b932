"""Runs ``python -m impyard`` with its stdout on a pseudo-terminal of a given size, the way
a person at a terminal sees it (rich and ``isatty`` take the terminal path)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.helpers.cli import CliResult
from tests.helpers.git import GIT_ENV


def run_on_terminal(
    home: Path, *args: str, columns: int = 80, env: dict[str, str] | None = None
) -> CliResult:
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    full_env = {**os.environ, **GIT_ENV, "COLUMNS": str(columns), "TERM": "xterm"}
    full_env.pop("IMPYARD_HOME", None)
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(home), *args],
        stdout=secondary,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=full_env,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    _, err = proc.communicate(timeout=60)
    stderr, code = err.decode(), proc.returncode
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    return CliResult(code, text, stderr)
