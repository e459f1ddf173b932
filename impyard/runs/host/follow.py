"""Following one run from any process: its box's output as it arrives, then its end.

The same reader serves ``impyard run`` (which drives the run in this process),
``impyard runs logs -f`` (a run of another process: a foreground run or serve's) and the
console. It reads only files the run's writer made (``impyard.box.watch.livelog``) and the
manifest, so any number of followers watch one run without the run knowing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from impyard.box.watch.livelog import LogReader
from impyard.home import Home
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import TERMINAL_STATES, Manifest

#: How often an idle follower looks again (the writer appends as the box prints).
POLL_SECONDS = 0.1
#: How long a follower of a finished run waits for a log that was never ended (the
#: writer's process died with the box running and nothing copied the log since).
_UNENDED_GRACE_SECONDS = 2.0


def box_output(
    home: Home,
    run_id: str,
    *,
    poll_seconds: float = POLL_SECONDS,
    stopped: Callable[[], bool] = lambda: False,
    wait: Callable[[float], object] = time.sleep,
) -> Iterator[bytes]:
    """The run's box output from its first byte, as it arrives, until the log has ended
    and the run is finished (or ``stopped()`` turns true). ``wait`` is how an idle
    follower waits (one in the run's own process is woken when the run ends)."""
    reader = LogReader(home.box_log(run_id))
    unended_since: float | None = None
    while not stopped():
        chunks = reader.read()
        yield from chunks
        if reader.ended:
            return
        if chunks:
            continue
        if finished(home, run_id):
            # The end may have been written between the read and this look.
            while more := reader.read():
                yield from more
            if reader.ended:
                return
            if reader.legacy():
                yield from reader.read_whole()
                return
            if not reader.started():
                return  # the run ended before a box printed anything
            unended_since = unended_since or time.monotonic()
            if time.monotonic() - unended_since > _UNENDED_GRACE_SECONDS:
                return
            time.sleep(poll_seconds)  # not ``wait``: it may return at once from now on
            continue
        wait(poll_seconds)


def finished(home: Home, run_id: str) -> bool:
    record = manifests.read_or_none(home, run_id)
    return record is None or record.state in TERMINAL_STATES


def wait_finished(
    home: Home,
    run_id: str,
    *,
    poll_seconds: float = POLL_SECONDS,
    stopped: Callable[[], bool] = lambda: False,
) -> Manifest | None:
    """The run's terminal manifest once it has one (the log ends when the box exits; the
    run ends after its checkpoint), or None when ``stopped()`` turned true first."""
    while not stopped():
        record = manifests.read(home, run_id)
        if record.state in TERMINAL_STATES:
            return record
        time.sleep(poll_seconds)
    return None
