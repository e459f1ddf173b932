"""The waiting room in front of each imp's lane: changes that queue up while the lane is
busy are landed together by whichever thread gets the lane next.

The lane lock (a file lock) serializes an imp's lane across processes, and one
landing costs a handful of fsyncs whatever its size. So within a process, a
caller puts its prepared change in the imp's room and waits for its turn; the
thread whose turn it is (the leader) takes the lane lock, then everything
waiting (its own change and all that arrived meanwhile) and lands them in one
pass; every caller gets its own outcome, or the exception that ended its part
of the pass. A caller whose change another leader took only waits for it.

Each ticket keeps when it was queued and when its pass settled it (monotonic clock,
both in the caller's process): how long the change spent in the lane (``lanepass``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Ticket(Generic[T, R]):
    """One waiting change and, once its pass settles it, its outcome."""

    def __init__(self, item: T) -> None:
        self.item = item
        self._result: R | None = None
        self._error: BaseException | None = None
        self.done = False
        self.queued = time.monotonic()
        self.ended: float | None = None

    def settle(self, result: R) -> None:
        self._result, self.done, self.ended = result, True, time.monotonic()

    def fail(self, error: BaseException) -> None:
        self._error, self.done, self.ended = error, True, time.monotonic()

    @property
    def failed(self) -> bool:
        return self._error is not None

    @property
    def result(self) -> R | None:
        """The outcome once settled (None while open or failed)."""
        return self._result

    def outcome(self) -> R:
        if self._error is not None:
            raise self._error
        if not self.done:
            raise RuntimeError("the lane pass ended without settling this change")
        return self._result  # type: ignore[return-value]  # settled: R, which may be None


class _Room:
    def __init__(self) -> None:
        self.mutex = threading.Lock()  # guards ``waiting``
        self.turn = threading.Lock()  # held by the leader for its whole pass
        self.waiting: list[Ticket[Any, Any]] = []


_rooms: dict[Hashable, _Room] = {}
_rooms_lock = threading.Lock()


def _room(key: Hashable) -> _Room:
    with _rooms_lock:
        room = _rooms.get(key)
        if room is None:
            room = _rooms[key] = _Room()
        return room


def waiting(key: Hashable) -> int:
    """How many changes wait in room ``key`` for a leader to take them."""
    room = _room(key)
    with room.mutex:
        return len(room.waiting)


def take_turn(
    key: Hashable,
    item: T,
    exclusive: Callable[[], AbstractContextManager[object]],
    land: Callable[[list[Ticket[T, R]]], None],
) -> R:
    """Queue ``item`` in room ``key`` and return its outcome once a pass has landed it.

    The leader enters ``exclusive()`` (the lane lock) before taking what waits, so
    changes that arrive while it waits for another process are in its pass too.
    ``land`` settles or fails every ticket it is given; one it leaves open fails.
    An ``Exception`` ending ``land`` fails the tickets still open and reaches their
    callers, not the leader's own settled one; anything else (an interrupt, the host
    going down) fails them and is re-raised in the leader as well.
    """
    room = _room(key)
    ticket: Ticket[T, R] = Ticket(item)
    with room.mutex:
        room.waiting.append(ticket)
    with room.turn:
        if not ticket.done:
            with exclusive():
                with room.mutex:
                    batch, room.waiting = room.waiting, []
                _lead(batch, land)
    return ticket.outcome()


def _lead(batch: list[Ticket[T, R]], land: Callable[[list[Ticket[T, R]]], None]) -> None:
    try:
        land(batch)
    except Exception as exc:
        _fail_open(batch, exc)
    except BaseException as exc:
        _fail_open(batch, exc)
        raise
    _fail_open(batch, RuntimeError("the lane pass ended without settling this change"))


def _fail_open(batch: list[Ticket[T, R]], error: BaseException) -> None:
    for ticket in batch:
        if not ticket.done:
            ticket.fail(error)
