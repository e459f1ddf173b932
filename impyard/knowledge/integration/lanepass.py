"""What each lane pass leaves in the journal: one ``lane.pass`` event, read by ``/metrics``.

The event names the imp, how many changes the pass took (``size``), how many ended each
way (``outcomes``: a lane checkpoint, or ``error`` for one whose part of the pass
raised), and for each change, in the pass's order, the seconds from when it entered the
lane (queued, after its validation) to when the pass settled it: main moved with its
commit, or it was refused, found landed, or failed (``seconds``).

It is written by the thread that led the pass, once the pass is over: after main moved
and every change was settled, and after the lane lock and the turn were let go, so the
next pass does not wait for it. A crash before that leaves no event; one never claims
main moved before it did. Writing it is best effort: a journal that cannot be appended
to does not turn a change that landed into an error, and the line is not fsynced (the
next synced journal line, such as the run's own ``knowledge.validated``, makes it
durable; a power cut before that loses it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from impyard.journal.log import Journal
from impyard.knowledge.integration.lanequeue import Ticket, take_turn

if TYPE_CHECKING:  # the console reads the event's name without loading the lane (pygit2)
    from impyard.knowledge.integration.lanerecord import LaneResult

LANE_PASS_EVENT = "lane.pass"
ERROR = "error"

T = TypeVar("T")


def take_recorded_turn(
    journal: Path,
    imp: str,
    key: Hashable,
    item: T,
    exclusive: Callable[[], AbstractContextManager[object]],
    land: Callable[[list[Ticket[T, LaneResult]]], None],
) -> LaneResult:
    """``lanequeue.take_turn``, and if this caller led the pass, its ``lane.pass`` event."""
    led: list[list[Ticket[T, LaneResult]]] = []

    def leading(batch: list[Ticket[T, LaneResult]]) -> None:
        led.append(batch)
        land(batch)

    try:
        return take_turn(key, item, exclusive, leading)
    finally:
        for batch in led:
            record_pass(journal, imp, batch)


def pass_fields(imp: str, batch: Sequence[Ticket[Any, LaneResult]]) -> dict[str, Any]:
    """The ``lane.pass`` event's fields for a settled ``batch``."""
    outcomes: Counter[str] = Counter()
    seconds: list[float] = []
    for ticket in batch:
        result = ticket.result
        outcomes[ERROR if ticket.failed or result is None else result.checkpoint] += 1
        ended = ticket.ended if ticket.ended is not None else ticket.queued
        seconds.append(round(max(0.0, ended - ticket.queued), 4))
    return {"imp": imp, "size": len(batch), "outcomes": dict(outcomes), "seconds": seconds}


def record_pass(journal: Path, imp: str, batch: Sequence[Ticket[Any, LaneResult]]) -> None:
    # A metric's record: the pass's changes have their outcomes whether it is written or
    # not. Not fsynced (that is most of a journal line's cost, 50 times the write), so a
    # pass of one change costs its caller tens of microseconds; a power cut may lose it.
    with suppress(OSError):
        Journal(journal).record_unsynced(LANE_PASS_EVENT, **pass_fields(imp, batch))
