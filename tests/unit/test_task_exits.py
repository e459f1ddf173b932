"""containerd's task events as the exit watcher reads them, from a real process's output
(the lines ``ctr events`` prints, recorded from engine 20.10's containerd)."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from impyard.box.docker import taskexits
from impyard.box.docker.taskexits import TaskExits

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def line(topic: str, body: str, namespace: str = "moby") -> str:
    return f"2026-12-06 17:35:45.732174068 +0000 UTC {namespace} {topic} {body}\n"


def watcher(tmp_path: Path, text: str, then_wait: bool = True) -> TaskExits:
    """A watcher reading ``text`` from a real process that then stays (or ends)."""
    events = tmp_path / "events"
    events.write_text(text)
    tail = "import time; time.sleep(30)" if then_wait else ""
    script = (
        f"import sys; sys.stdout.write(open({str(events)!r}).read()); sys.stdout.flush()\n{tail}"
    )
    return TaskExits([sys.executable, "-c", script])


def test_a_clean_exit_is_seen_and_any_other_end_is_left_to_the_engine(tmp_path: Path) -> None:
    text = (
        line("/tasks/exit", f'{{"container_id":"{A}","id":"{A}","pid":7,"exited_at":"x"}}')
        + line("/tasks/exit", f'{{"container_id":"{B}","id":"{B}","pid":8,"exit_status":3}}')
        + line("/tasks/oom", f'{{"container_id":"{C}"}}')
        + line("/tasks/exit", f'{{"container_id":"{C}","id":"{C}","pid":9}}')
        # An exec's exit in a box is not the box's, nor is another namespace's.
        + line("/tasks/exit", f'{{"container_id":"{D}","id":"exec-1","pid":10}}')
        + line("/tasks/exit", f'{{"container_id":"{D}","id":"{D}","pid":11}}', "other")
        + "not an event\n"
    )
    exits = watcher(tmp_path, text)
    try:
        assert exits.wait_clean(A, 10, lambda: False) is True
        assert exits.wait_clean(B, 10, lambda: False) is False  # status 3
        assert exits.wait_clean(C, 10, lambda: False) is False  # OOM kill seen first
        assert exits.alive
        assert exits.wait_clean(D, 0.3, lambda: False) is False  # never seen: timed out
        gave_up = [True]
        assert exits.wait_clean(D, 10, lambda: gave_up[0]) is False
        # An exit is answered once: a second wait on the same box is not clean.
        assert exits.wait_clean(A, 0.2, lambda: False) is False
    finally:
        exits.close()
    assert not exits.alive


def test_a_watcher_whose_stream_ended_answers_at_once(tmp_path: Path) -> None:
    exits = watcher(tmp_path, "", then_wait=False)
    try:
        assert exits.wait_clean(A, 30, lambda: False) is False
        assert not exits.alive
    finally:
        exits.close()


def test_an_oom_kill_published_after_the_exit_is_still_reported(tmp_path: Path) -> None:
    """On a loaded machine a shim may publish the OOM just after the exit;
    the engine then reports a plain SIGKILL, and the watcher is asked with a grace."""
    exit_c = line("/tasks/exit", f'{{"container_id":"{C}","id":"{C}","pid":9,"exit_status":137}}')
    exit_b = line("/tasks/exit", f'{{"container_id":"{B}","id":"{B}","pid":8,"exit_status":137}}')
    first, late = tmp_path / "first", tmp_path / "late"
    first.write_text(exit_c + exit_b)
    late.write_text(line("/tasks/oom", f'{{"container_id":"{C}"}}'))
    script = (
        "import sys, time\n"
        f"sys.stdout.write(open({str(first)!r}).read()); sys.stdout.flush()\n"
        "time.sleep(0.3)\n"
        f"sys.stdout.write(open({str(late)!r}).read()); sys.stdout.flush()\n"
        "time.sleep(30)\n"
    )
    exits = TaskExits([sys.executable, "-c", script])
    try:
        assert exits.wait_clean(C, 10, lambda: False) is False  # status 137
        assert exits.oom_killed(C, 10) is True  # waited for the event behind the exit
        assert exits.oom_killed(C, 0) is False  # answered once, then forgotten
        assert exits.wait_clean(B, 10, lambda: False) is False
        assert exits.oom_killed(B, 0.2) is False  # a kill with no OOM event is not one
    finally:
        exits.close()


def test_a_watcher_that_keeps_dying_is_started_again_at_most_every_half_minute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``ctr`` that exits at once (containerd restarting) is not spawned for every run."""
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "containerd.sock"))
    starts = tmp_path / "starts"
    fake_ctr = tmp_path / "ctr"
    fake_ctr.write_text(f"#!/bin/sh\necho started >> {starts}\nexit 1\n")
    fake_ctr.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    monkeypatch.setattr(taskexits, "CONTAINERD_SOCKETS", (tmp_path / "containerd.sock",))
    taskexits.stop()
    try:
        first = taskexits.watch()
        assert first is not None
        deadline = time.monotonic() + 10
        while first.alive and time.monotonic() < deadline:
            time.sleep(0.01)  # until its reader saw the stream end
        assert not first.alive
        for _ in range(5):  # runs that follow meanwhile start nothing
            assert taskexits.watch() is None
        assert starts.read_text().count("started") == 1
        monkeypatch.setattr(taskexits, "RESTART_SECONDS", 0.0)
        again = taskexits.watch()
        assert again is not None and again is not first
        while again.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        assert starts.read_text().count("started") == 2
    finally:
        taskexits.stop()
        listening.close()
