"""SIGTERM to a real ``impyard serve`` process at seeded random moments, on a main thread
preempted where it hurts, and what it did then.

A moment is "once serve has printed N lines, wait D seconds": right after a line is where
serve's main thread is busiest (it printed the line and moves on to its next wait), and
where an owner's or a test's signal lands, since they act on what serve says. The serve
runs with its main thread preempted, every time, in the spot a loaded machine preempts it
only now and then: every ``threading.Event.wait`` with a timeout (serve's own waits; not
``Thread.start``'s, which would only slow its start-up) on the main thread holds the
event's internal lock ``HOLD_SECONDS`` before it waits, so a signal that arrives then
finds that lock taken by the thread its handler runs on.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.git import GIT_ENV

#: How long the main thread is held, preempted, in each of its waits.
HOLD_SECONDS = 0.5
#: ``python -c`` code: the impyard CLI (``sys.argv[1:]``) with the main thread preempted
#: as above. The ``wait`` is the standard library's own, plus the sleep.
PREEMPTED_IMPYARD = f"""
import threading, time

def wait(self, timeout=None):
    with self._cond:
        if timeout is not None and threading.current_thread() is threading.main_thread():
            time.sleep({HOLD_SECONDS})
        signaled = self._flag
        if not signaled:
            signaled = self._cond.wait(timeout)
        return signaled

threading.Event.wait = wait
from impyard.cli.entry import main
main()
"""

#: How long serve may take to print the line a moment waits for.
LINE_WAIT_SECONDS = 60.0


@dataclass(frozen=True)
class Moment:
    lines: int  # serve's stdout lines seen first (0: as soon as it is spawned)
    delay: float  # then this many seconds

    def __str__(self) -> str:
        return f"{self.delay:.2f}s after line {self.lines}"


def moments(seed: str, count: int, most_lines: int) -> list[Moment]:
    """``count`` moments, after 0, 1, … ``most_lines`` lines in turn, alternately while the
    main thread is still held in the wait it went to after the line and within a second."""
    rng = random.Random(seed)
    return [
        Moment(i % (most_lines + 1), rng.uniform(0, 1 if i % 2 else HOLD_SECONDS))
        for i in range(count)
    ]


@dataclass
class Stopped:
    code: int
    stdout: list[str]
    stderr: str


def stop_serve_at(
    home: Path, moment: Moment, grace: float, *args: str, env: dict[str, str] | None = None
) -> Stopped:
    """Spawn ``impyard serve *args`` on ``home`` with ``grace`` as its shutdown grace, send
    SIGTERM at ``moment``; AssertionError unless it exits within ``grace`` of it."""
    full_env = {
        **os.environ,
        **GIT_ENV,
        **(env or {}),
        "IMPYARD_SHUTDOWN_GRACE_SECONDS": f"{grace:g}",
    }
    full_env.pop("IMPYARD_HOME", None)
    serve = subprocess.Popen(
        [sys.executable, "-c", PREEMPTED_IMPYARD, "--home", str(home), "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    assert serve.stdout is not None and serve.stderr is not None
    lines: list[str] = []
    printed = threading.Condition()
    errors: list[str] = []

    def read_out() -> None:
        assert serve.stdout is not None
        for line in serve.stdout:
            with printed:
                lines.append(line.rstrip("\n"))
                printed.notify_all()
        with printed:
            lines.append("")  # end of output: no line a moment waits for will come
            printed.notify_all()

    readers = [
        threading.Thread(target=read_out, daemon=True),
        threading.Thread(target=lambda: errors.append(serve.stderr.read()), daemon=True),  # type: ignore[union-attr]
    ]
    for reader in readers:
        reader.start()
    try:
        with printed:
            seen = printed.wait_for(lambda: len(lines) >= moment.lines, LINE_WAIT_SECONDS)
        assert seen, f"serve printed no line {moment.lines} in {LINE_WAIT_SECONDS:g}s: {lines}"
        time.sleep(moment.delay)
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"serve did not exit within its grace ({grace:g}s) of a SIGTERM {moment}; "
                f"its lines: {lines}"
            ) from None
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        for reader in readers:
            reader.join(10)
        serve.stdout.close()
        serve.stderr.close()
    return Stopped(serve.returncode, [line for line in lines if line], "".join(errors))


def assert_stopped_cleanly(stopped: Stopped, moment: Moment) -> None:
    """Either SIGTERM stopped serve (exit 0, its stop line says so), or it came before
    serve took the signal over and ended it outright, before serve said anything."""
    if stopped.code == -signal.SIGTERM:
        assert stopped.stdout == [], (str(moment), stopped.stdout)
    else:
        assert stopped.code == 0, (str(moment), stopped.code, stopped.stderr)
        assert "impyard serve: stopped by SIGTERM: " in stopped.stdout[-1], (
            str(moment),
            stopped.stdout,
        )
    assert "Traceback" not in stopped.stderr, stopped.stderr


def boxes_of(home: Path) -> list[str]:
    """The engine's boxes, running or not, whose run lives in ``home`` (other tests' boxes
    on the same engine are not this one's)."""
    import docker

    client = docker.from_env(timeout=10)
    try:
        found = client.api.containers(all=True, filters={"label": "impyard.run"})
    finally:
        client.close()
    return [c["Id"] for c in found if (home / "runs" / c["Labels"]["impyard.run"]).is_dir()]
