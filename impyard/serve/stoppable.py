"""Calls serve's main thread waits for only until a stop is asked.

An engine that takes the connection and never answers holds a call for the whole
``docker_timeout_seconds`` (60 s by default), longer than the shutdown grace; serve
must stop within its grace whatever the engine does. So such a call runs on a daemon
thread, and the main thread waits for either its end or the stop. A call left behind
is abandoned with its thread: its answer no longer matters to a serve that stops, and
a daemon thread does not hold the process's exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: How often the waiting thread looks at the stop (a stop is seen within this).
POLL_SECONDS = 0.1


def unless_stopped(stop: threading.Event, name: str, fn: Callable[[], object]) -> bool:
    """Run ``fn`` on a thread named ``name``; True once it returned, False when ``stop``
    was set first. What ``fn`` raised is raised here."""
    if stop.is_set():
        return False
    failure: list[BaseException] = []
    ended = threading.Event()

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised in the waiting thread
            failure.append(exc)
        finally:
            ended.set()

    threading.Thread(target=target, name=name, daemon=True).start()
    while not ended.wait(POLL_SECONDS):
        if stop.is_set():
            return False
    if failure:
        raise failure[0]
    return True


def recover_on_thread(
    recover: Callable[[], object],
    *,
    each_turn: Callable[[], None],
    may_leave: Callable[[], bool],
) -> None:
    """Run ``recover`` on a thread, calling ``each_turn`` while it runs; return early once
    ``may_leave`` says so. Recovery is crash-safe (it resumes whatever a dead host left), so
    a serve that stops leaves the rest to the next start rather than outwait an engine that
    does not answer; the daemon thread does not hold the exit. What ``recover`` raised is
    raised here."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            recover()
        except BaseException as exc:  # re-raised in the waiting thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="impyard-recovery", daemon=True)
    thread.start()
    while thread.is_alive():
        each_turn()
        if may_leave():
            return
        thread.join(POLL_SECONDS * 2)
    if failure:
        raise failure[0]
