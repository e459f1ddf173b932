"""A run driven by a process of its own, so the command that asked for it can return.

``impyard run --detach`` starts ``impyard _drive`` in a new session (no terminal, so a
closed or killed shell does not reach it), hands it the request on stdin and reads
its progress as JSON lines on a pipe: ``admitted`` (the run id), then ``started`` (the
box runs) or ``ended`` (the run finished before a box ran) or ``error`` (refused at
admission). Once the box has started the driver stops writing to the pipe, and the
command returns; the driver takes the run to its end as any foreground run does (the
manifest records each state first, so a driver that dies is recovered by serve).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import IO, Any

from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.runs.records.model import Manifest, RunRequest

#: How long the command waits for the driver to admit the run and start its box.
START_WAIT_SECONDS = 600.0


class DetachError(ImpyardError):
    """The driver refused the run or died before its box started."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Detached:
    run_id: str
    #: The run's manifest when it ended before a box started (else it is running).
    ended: Manifest | None = None


def spawn(home: Home, request: RunRequest) -> Detached:
    """Start a driver for ``request`` and return once its box runs (or the run ended)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(home.root), "_drive"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    with proc.stdin:
        proc.stdin.write(json.dumps(asdict(request)).encode())
    run_id: str | None = None
    with proc.stdout:
        for raw in proc.stdout:
            message = json.loads(raw)
            if "admitted" in message:
                run_id = str(message["admitted"])
            elif "started" in message and run_id is not None:
                return Detached(run_id)
            elif "ended" in message and run_id is not None:
                return Detached(run_id, Manifest.from_dict(message["ended"]))
            elif "error" in message:
                raise DetachError(str(message["error"]), int(message.get("exit_code", 1)))
    code = proc.wait()
    raise DetachError(f"the run's driver process ended before its box started (status {code})")


def read_request(stream: IO[bytes]) -> RunRequest:
    data = json.loads(stream.read())
    return RunRequest(**data)


class ProgressPipe:
    """The driver's side of the pipe: one JSON line per message, and silence once the
    command that waits on it has what it needs (it may be gone by then)."""

    def __init__(self) -> None:
        self._open = True

    def send(self, **message: Any) -> None:
        if not self._open:
            return
        try:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()
        except OSError:
            self._open = False

    def close(self) -> None:
        """From now on stdout goes nowhere: the waiting command returned."""
        if not self._open:
            return
        self._open = False
        devnull = os.open(os.devnull, os.O_WRONLY)
        with contextlib.suppress(OSError):
            sys.stdout.flush()
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
