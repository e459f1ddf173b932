"""A handed run's client interrupted while it writes the run's output: it tells serve
and shows the run's end, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from typing import Any

import pytest

from impyard.cli.running import handoff


def test_a_signal_while_output_is_written_tells_serve_and_waits_for_the_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    client, serve = socket.socketpair()
    real_write = handoff._write_out

    def write_then_signalled(message: dict[str, Any]) -> bool:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the line is written
        return real_write(message)

    monkeypatch.setattr(handoff, "_write_out", write_then_signalled)
    told: list[bytes] = []

    def serve_side() -> None:
        serve.sendall(json.dumps({"out": "working\n"}).encode() + b"\n")
        told.append(serve.recv(1))  # b"": the client shut its side down, as Ctrl-C does
        end = {"end": {"exit_code": 4, "stdout": ["run quarantined (host interrupted)"]}}
        serve.sendall(json.dumps(end).encode() + b"\n")
        serve.close()

    thread = threading.Thread(target=serve_side)
    thread.start()
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        code = handoff._show(client, [], {})
    finally:
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
        thread.join(5)
        client.close()
    assert code == 4
    assert told == [b""]
    shown = capsys.readouterr().out
    assert "working" in shown and "quarantined (host interrupted)" in shown
