"""How a run is shown while and after it runs: its box's output and its outcome line."""

from __future__ import annotations

import os
import sys
import threading
from typing import Protocol

from impyard.common.textsafe import StreamEscaper, visible
from impyard.home import Home
from impyard.runs.host.follow import box_output
from impyard.runs.records.model import Manifest


def outcome_lines(m: Manifest) -> list[str]:
    """``<run> <checkpoint> [<commit>] [(<reason>)]``, then one line per violation."""
    line = f"{m.run_id} {m.checkpoint}"
    if m.produced_commit:
        line += f" {m.produced_commit}"
    if m.reason:
        line += f" ({m.reason})"
    lines = [line]
    lines += [
        f"  {error.path or '-'}: {error.rule}: {error.message}" for error in m.validation_errors
    ]
    # Paths and messages can carry what a box chose (a file name): shown, never obeyed.
    return [visible(text) for text in lines]


def started_line(m: Manifest) -> str:
    """The first line of a run: what it is and how to follow it from another shell."""
    return f"run {m.run_id} ({m.imp}, {m.mode}): follow with `impyard runs logs -f {m.run_id}`"


class BoxOutput:
    """Box output onto stdout as it arrives: escaped for the owner's terminal, or the
    box's bytes exactly (``raw``)."""

    def __init__(self, raw: bool = False) -> None:
        self._raw = raw
        self._escaper = StreamEscaper()
        self._ends_with_newline = True
        #: The reader went away (``| head``): nothing more is written, the run goes on.
        self.broken = False

    def write(self, data: bytes) -> None:
        if not data or self.broken:
            return
        self._ends_with_newline = data.endswith(b"\n")
        try:
            if self._raw:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
            else:
                sys.stdout.write(self._escaper.feed(data))
                sys.stdout.flush()
        except BrokenPipeError:
            self._reader_gone()

    def close(self) -> None:
        """Finish the output on a line of its own, so the outcome line starts a new one."""
        if self.broken:
            return
        try:
            if not self._raw:
                sys.stdout.write(self._escaper.flush())
            if not self._ends_with_newline:
                sys.stdout.write("\n")
                self._ends_with_newline = True
            sys.stdout.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        self.broken = True
        # What is still buffered would fail again at exit: stdout goes nowhere from now on.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class OutputSink(Protocol):
    """Where a run's box output goes: this process's stdout, or a handed-over run's client."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class OutputStreamer:
    """Shows a run's box output from a thread while this process drives the run."""

    def __init__(self, home: Home, run_id: str, output: OutputSink) -> None:
        self._home = home
        self._run_id = run_id
        self._output = output
        self._stop = threading.Event()
        #: Set when the run has ended, so an idle follower reads the rest at once.
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._stream, name="box-output", daemon=True)
        self._thread.start()

    def _stream(self) -> None:
        chunks = box_output(
            self._home, self._run_id, stopped=self._stop.is_set, wait=self._ended.wait
        )
        for chunk in chunks:
            self._output.write(chunk)

    def finish(self, timeout: float = 30.0) -> None:
        """After the run ended: the rest of its output, then a clean line end."""
        self._ended.set()
        self._thread.join(timeout)
        self._stop.set()
        self._thread.join(5)
        self._output.close()
