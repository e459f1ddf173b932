"""Box exits as containerd reports them, before the engine is done with the box.

The engine answers ``wait`` only once it has deleted the box's task (under gVisor that
tears the sandbox down) and closed the box's streams: measured on this machine kind,
20-25 ms after the box's first process ended under runc and ~50 ms under runsc, a
quarter of a warm run. containerd publishes the exit (``/tasks/exit``, carrying the
status the engine later reports, since the engine takes it from that same event) as
soon as the shim reaps the process. By then nothing in the box runs any more: when a
PID namespace's first process ends, the kernel (and gVisor's sentry, which models it)
kills every other process of that namespace before the first one can be reaped. So a
run that sees its box's exit here may read what the box left at once.

The events come from one long-lived ``ctr events`` per process on the engine's
containerd socket (Debian's docker.io and Docker's own packages both ship ``ctr``),
started when a run's box output is first followed (``watch``) and stopped at exit. Only
a clean exit is taken from here: status 0 and no ``/tasks/oom`` seen for the box before
its exit (the engine's ``OOMKilled`` comes from that same event, in the same order).
The one other answer taken from here is an OOM kill the engine missed: on a loaded
machine the shim may publish ``/tasks/oom`` just after ``/tasks/exit`` (2 boxes in 30
under gVisor with both cores busy), and the engine (20.10) then reports a plain SIGKILL;
this watcher still sees the event. Anything else, and every box this watcher does not
see (no ``ctr``, a socket this user may not open, an engine that is not local, another
containerd, the watcher gone), is left to the engine's ``wait`` as before, which the
caller runs beside this one (``launch.wait_box``).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from impyard.box.docker.engine import engine_url

V = TypeVar("V")

#: Where the engine's containerd listens: the one dockerd manages itself (present only
#: when dockerd runs its own), then the system's.
CONTAINERD_SOCKETS = (
    Path("/var/run/docker/containerd/containerd.sock"),
    Path("/run/containerd/containerd.sock"),
)
#: The engine's own containerd namespace.
ENGINE_NAMESPACE = "moby"
#: How long an exit by SIGKILL waits for an OOM event published after it (seen within a
#: millisecond on a loaded machine; only a box killed by a signal pays it).
OOM_AFTER_EXIT_SECONDS = 0.25
#: Exits and OOM kills remembered for boxes nobody waits for yet (a box may end before its
#: run asks); the oldest are forgotten first.
REMEMBERED = 4096


class TaskExits:
    """The exits containerd reports, read from a ``ctr events`` stream by one thread."""

    def __init__(self, command: list[str]) -> None:
        self._changed = threading.Condition()
        self._exits: OrderedDict[str, int] = OrderedDict()
        self._ooms: OrderedDict[str, None] = OrderedDict()
        self._alive = True
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches serve, which stops this
        )
        self._reader = threading.Thread(target=self._read, name="task-exits", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._alive

    def _read(self) -> None:
        assert self._process.stdout is not None
        try:
            for line in self._process.stdout:
                self._take(line)
        finally:
            with self._changed:
                self._alive = False
                self._changed.notify_all()

    def _take(self, line: bytes) -> None:
        # "<date> <time> +0000 UTC <namespace> <topic> <event as JSON>"
        parts = line.split(b" ", 6)
        if len(parts) != 7 or parts[4] != ENGINE_NAMESPACE.encode():
            return
        topic = parts[5]
        if topic not in (b"/tasks/exit", b"/tasks/oom"):
            return
        try:
            event = json.loads(parts[6])
            container = str(event["container_id"])
        except (ValueError, KeyError, TypeError):
            return
        with self._changed:
            if topic == b"/tasks/oom":
                _remember(self._ooms, container, None)
            elif event.get("id") == container:  # the box's first process, not an exec
                _remember(self._exits, container, int(event.get("exit_status", 0)))
            else:
                return
            self._changed.notify_all()

    def poke(self) -> None:
        """Wake every waiter (one of them has its answer from elsewhere)."""
        with self._changed:
            self._changed.notify_all()

    def wait_clean(self, container_id: str, timeout: float, given_up: Callable[[], bool]) -> bool:
        """True once the box's first process ended with status 0 and no OOM kill was seen;
        False when it ended otherwise, the watcher is gone, ``given_up()`` turned true
        (checked on each ``poke``) or ``timeout`` seconds passed."""
        with self._changed:
            ended = self._changed.wait_for(
                lambda: container_id in self._exits or not self._alive or given_up(), timeout
            )
            status = self._exits.pop(container_id, None) if ended else None
            return status == 0 and container_id not in self._ooms

    def oom_killed(self, container_id: str, grace: float) -> bool:
        """True when containerd reported an OOM kill of the box, waiting up to ``grace``
        seconds for one published late; the box is forgotten either way."""
        with self._changed:
            self._changed.wait_for(lambda: container_id in self._ooms or not self._alive, grace)
            return self._ooms.pop(container_id, False) is None

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
        self._process.wait()
        self._reader.join(timeout=5)
        if self._process.stdout is not None:
            self._process.stdout.close()


def _remember(found: OrderedDict[str, V], key: str, value: V) -> None:
    found[key] = value
    found.move_to_end(key)
    while len(found) > REMEMBERED:
        found.popitem(last=False)


_watch: TaskExits | None = None
_watch_lock = threading.Lock()
#: When this process last started a watcher: one that died is started again at most
#: this often, so a ``ctr`` that keeps failing (containerd restarting, a socket it cannot
#: use) costs a process start per half minute, not per run.
_started_at: float | None = None
RESTART_SECONDS = 30.0


def watch() -> TaskExits | None:
    """Start this process's watcher (once); None where containerd cannot be watched: no
    ``ctr``, no containerd socket this user may open (it is root's; a ``ctr`` that cannot
    connect would be started again for every run), or an engine reached over the network."""
    global _watch, _started_at
    with _watch_lock:
        if _watch is not None and _watch.alive:
            return _watch
        if _watch is not None:
            _watch.close()  # reaps its process and closes its pipe
            _watch = None
        now = time.monotonic()
        if _started_at is not None and now - _started_at < RESTART_SECONDS:
            return None
        ctr = shutil.which("ctr")
        socket = next((s for s in CONTAINERD_SOCKETS if s.is_socket()), None)
        if not engine_url().startswith("unix://") or ctr is None or socket is None:
            return None
        if not os.access(socket, os.R_OK | os.W_OK):
            return None
        _started_at = now
        try:
            _watch = TaskExits([ctr, "--address", str(socket), "events"])
        except OSError:
            return None
        atexit.unregister(stop)  # once, however often a dead watcher was replaced
        atexit.register(stop)
        return _watch


def watching() -> TaskExits | None:
    """This process's watcher while it runs."""
    found = _watch
    return found if found is not None and found.alive else None


def stop() -> None:
    global _watch, _started_at
    with _watch_lock:
        found, _watch, _started_at = _watch, None, None
    if found is not None:
        found.close()
