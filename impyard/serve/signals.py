"""serve's SIGINT and SIGTERM, acted on by a thread of their own, never in the handler.

A Python signal handler runs on the main thread between two of its bytecodes, wherever
that thread is: inside ``threading.Event.wait``, say, holding the event's internal lock
for the few steps before and after the wait itself. A handler that calls ``set`` on that
event then waits for a lock its own thread holds, forever: serve once hung so on
SIGTERM, its main thread deadlocked in the very ``_stop.wait`` the signal was meant to
end (a loaded machine widens those few steps enough). So the handler here takes no lock
and calls nothing that could: it puts the signal's number on a ``SimpleQueue``, whose
``put`` is reentrant and safe in a signal handler, and the ``impyard-signals`` thread
hands each signal, in order, to serve's callback, where locks are safe to take.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import SimpleQueue
from types import FrameType
from typing import Any

#: The signals that stop serve: the first gracefully, the second at once.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_signals(on_stop: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, each SIGINT or SIGTERM calls ``on_stop`` with the signal's
    name, on a thread of its own; the previous handlers are back afterwards."""
    queue: SimpleQueue[int | None] = SimpleQueue()

    def handle(signum: int, frame: FrameType | None) -> None:
        del frame
        queue.put(signum)

    def deliver() -> None:
        while (signum := queue.get()) is not None:
            on_stop(signal.Signals(signum).name)

    thread = threading.Thread(target=deliver, name="impyard-signals", daemon=True)
    thread.start()
    previous: dict[signal.Signals, Any] = {}
    try:
        for stop in STOP_SIGNALS:
            previous[stop] = signal.signal(stop, handle)
        yield
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
        queue.put(None)
        thread.join()
