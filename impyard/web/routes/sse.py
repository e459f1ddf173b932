"""Server-Sent Events from blocking readers: a reader (``follow.box_output``, which sleeps
while a box is quiet) runs in its own thread and hands each item to the event loop; the
response sends a comment while nothing comes, so a closed tab is noticed, and asks the
reader to stop (its ``stopped`` callback) once the client is gone."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: Seconds between keep-alive comments on a quiet stream.
KEEPALIVE_SECONDS = 15.0
#: Readers following at once; a follower past this is refused (each holds a thread).
MAX_FOLLOWERS = 32

_followers = threading.BoundedSemaphore(MAX_FOLLOWERS)
_DONE = object()


def event(name: str, data: str) -> str:
    """One event; every line of ``data`` is its own ``data:`` field (the browser joins
    them with newlines), so no line of box text can start a field of its own."""
    lines = data.split("\n")
    return f"event: {name}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


def comment(text: str = "") -> str:
    return f": {text}\n\n"


def try_follow() -> bool:
    return _followers.acquire(blocking=False)


async def threaded(
    make: Callable[[Callable[[], bool]], Iterator[T]],
    keepalive: float = KEEPALIVE_SECONDS,
) -> AsyncIterator[T | None]:
    """The items of ``make(stopped)`` as they come, None after each ``keepalive`` seconds
    without one. Call ``try_follow`` first: this releases the slot it took."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()
    stop = threading.Event()

    def put(item: object) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the console is stopping
            stop.set()

    def pump() -> None:
        try:
            for item in make(stop.is_set):
                put(item)
                if stop.is_set():
                    break
        finally:
            put(_DONE)
            _followers.release()

    threading.Thread(target=pump, name="impyard-web-follow", daemon=True).start()
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield None
                continue
            if item is _DONE:
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
