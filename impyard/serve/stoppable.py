"""A call serve's main thread waits for only until a stop is asked.

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
