"""Drives the real ``impyard`` CLI against one data root, in this process or as a command.

In process, ``impyard.cli.main.main`` (the entry point with the one error handler) runs
with the environment, argv and stdin the command would get, its stdout and stderr
captured; everything it may change in the process (environment, signal handlers, root
logging handlers, the error-log home) is put back afterwards. The subprocess form runs
``python -m impyard``: for tests where a real process matters (the console entry, a
command that talks to the engine or owns signals).
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.git import GIT_ENV

#: Signals a command may take over (``run`` and ``serve`` do); restored after each call.
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


@dataclass
class Cli:
    """The real ``impyard`` CLI against one data root (``--home``).

    ``in_process=False`` spawns ``python -m impyard`` per call (``timeout`` applies there
    only); the default calls the CLI's ``main`` in this process, which is much faster.
    """

    home: Path
    in_process: bool = True

    def __call__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        input: str | None = None,
    ) -> CliResult:
        argv = ["--home", str(self.home), *args]
        if self.in_process:
            return run_in_process(argv, env=env or {}, input=input)
        full_env = {**os.environ, **GIT_ENV, **(env or {})}
        full_env.pop("IMPYARD_HOME", None)
        proc = subprocess.run(
            [sys.executable, "-m", "impyard", *argv],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            input=input,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)


def json_lines(text: str) -> list[dict[str, Any]]:
    """What a ``--json`` stream prints (``journal --json``): one JSON object per line."""
    return [json.loads(line) for line in text.splitlines()]


def run_in_process(argv: list[str], *, env: dict[str, str], input: str | None) -> CliResult:
    """``impyard *argv`` through ``impyard.cli.main.main``; the exit code as a process's."""
    from impyard.cli import main as cli_main

    stdout, stderr = _capture(), _capture()
    code = 0
    with (
        _environment({**GIT_ENV, **env}, drop=("IMPYARD_HOME",)),
        _process_state(argv),
        _stdin(input or ""),
        redirect_stdout(stdout),
        redirect_stderr(stderr),
    ):
        cli_main._error_log_home[0] = None  # as in a fresh process
        try:
            cli_main.main(argv)
        except SystemExit as exc:
            code = _exit_code(exc.code, stderr)
    return CliResult(code, _text(stdout), _text(stderr))


def _capture() -> io.TextIOWrapper:
    # A text stream over bytes, like a pipe: it has a .buffer and is not a terminal.
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    # What subprocess.run(text=True) reads: UTF-8 with universal newlines.
    return buffer.getvalue().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _exit_code(code: object, stderr: io.TextIOWrapper) -> int:
    """The process exit status ``sys.exit(code)`` would give."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


@contextmanager
def _environment(overrides: dict[str, str], drop: tuple[str, ...]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in (*overrides, *drop)}
    os.environ.update(overrides)
    for name in drop:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _process_state(argv: list[str]) -> Iterator[None]:
    """sys.argv as the command sees it; signal handlers and root logging put back after."""
    saved_argv = sys.argv
    saved_handlers = {signum: signal.getsignal(signum) for signum in _HANDLED_SIGNALS}
    root = logging.getLogger()
    saved_logging = (list(root.handlers), root.level)
    sys.argv = ["impyard", *argv]
    try:
        yield
    finally:
        sys.argv = saved_argv
        for signum, handler in saved_handlers.items():
            if handler is not None:  # None: installed outside Python, left alone
                signal.signal(signum, handler)
        root.handlers[:] = saved_logging[0]
        root.setLevel(saved_logging[1])


@contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8")
    try:
        yield
    finally:
        sys.stdin = saved


def run_json(cli: Cli, command: str, *extra: str, prompt: str = "p") -> tuple[int, dict[str, Any]]:
    """``impyard run yuko --prompt PROMPT --json --command COMMAND [extra]``: its exit
    status and the run record it printed (never a traceback)."""
    result = cli("run", "yuko", "--prompt", prompt, "--json", "--command", command, *extra)
    assert "Traceback" not in result.stderr, result.stderr
    record: dict[str, Any] = json.loads(result.stdout)
    return result.code, record
