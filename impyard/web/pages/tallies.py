"""What ``/metrics`` counts from the journal, kept up to date by one reader: gateway
requests (``gateway.request`` events) and lane passes (``lane.pass``: each pass's batch
size and each change's seconds in the lane, ``impyard.knowledge.integration.lanepass``).

The journal is read whole on the first scrape, then only what was appended since the
one before. Label values are bounded: past ``MAX_SERIES`` distinct ones, ``other``.
"""

from __future__ import annotations

import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable

from impyard.home import Home
from impyard.journal.query import JournalQuery
from impyard.journal.tail import Entry, JournalTail
from impyard.knowledge.integration.lanepass import LANE_PASS_EVENT

MAX_SERIES = 200
OTHER = "other"
GATEWAY_EVENT = "gateway.request"
BUDGET_RULE_PREFIX = "gateway.budget."
#: The journal names an allow rule by index and host (``gateway.allow[0] api.example.com``)
#: for the owner reading it; a label keeps the index alone, as ``/metrics`` may be public.
_ALLOW_RULE = re.compile(r"gateway\.allow\[\d+\]")
#: What the gateway journals for a request it let through.
_ALLOWED = frozenset({"allowed", "allow"})
#: Seconds a change spends in the lane: a lone one lands in tens of milliseconds; one
#: that queued behind a burst waits for every pass before its own.
LANE_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: Changes a pass takes (a pass publishes at most ``lane.MAX_CHAIN_COMMITS`` per chain).
LANE_BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)


class Bounded:
    """Label values kept to ``MAX_SERIES`` distinct ones, in the order first seen."""

    def __init__(self, limit: int = MAX_SERIES) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: object) -> str:
        text = "none" if value is None else str(value)
        if text in self._seen:
            return text
        if len(self._seen) >= self._limit:
            return OTHER
        self._seen.add(text)
        return text


class Histograms:
    """One histogram per label value, observed one value at a time (the values are not
    kept: a scrape costs the buckets, not the journal's length)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        #: Per label value: how many values fell at or under each bound but not the one
        #: before (the last slot: above every bound), and their sum.
        self.counts: dict[str, list[int]] = {}
        self.sums: defaultdict[str, float] = defaultdict(float)

    def observe(self, label: str, value: float) -> None:
        counts = self.counts.setdefault(label, [0] * (len(self.bounds) + 1))
        slot = next((i for i, bound in enumerate(self.bounds) if value <= bound), -1)
        counts[slot] += 1
        self.sums[label] += value

    def buckets(self, label: str) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last, as Prometheus wants them."""
        running, found = 0, []
        counts = self.counts[label]
        for bound, n in zip(self.bounds, counts[:-1], strict=True):
            running += n
            found.append((str(bound), float(running)))
        return [*found, ("+Inf", float(running + counts[-1]))]


class GatewayTally:
    """Counts of ``gateway.request`` events."""

    def __init__(self) -> None:
        self._labels = Bounded()
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.request_bytes: Counter[str] = Counter()
        self.response_bytes: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()

    def add(self, e: Entry) -> None:
        route, rule = self._labels(e.get("route")), self._labels(rule_label(e.get("rule")))
        decision = "allow" if e.get("decision") in _ALLOWED else "deny"
        self.requests[(route, rule, decision)] += 1
        self.request_bytes[route] += _count(e.get("request_bytes"))
        self.response_bytes[route] += _count(e.get("bytes"))
        if isinstance(e.get("rule"), str) and str(e["rule"]).startswith(BUDGET_RULE_PREFIX):
            self.refusals[rule] += 1


def rule_label(rule: object) -> object:
    """The rule a journal entry names, without the host an allow rule grants."""
    if isinstance(rule, str) and (index := _ALLOW_RULE.match(rule)) is not None:
        return index.group(0)
    return rule


class LaneTally:
    """Histograms of ``lane.pass`` events by imp: each change's seconds in the lane, and
    each pass's size."""

    def __init__(self) -> None:
        self._imps = Bounded()
        self.seconds = Histograms(LANE_SECONDS_BUCKETS)
        self.batch = Histograms(LANE_BATCH_BUCKETS)

    def add(self, e: Entry) -> None:
        imp = self._imps(e.get("imp"))
        size = e.get("size")
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            self.batch.observe(imp, size)
        seconds = e.get("seconds")
        for value in seconds if isinstance(seconds, list) else ():
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                self.seconds.observe(imp, float(value))


class JournalTallies:
    """The tallies above, fed by one tail of the journal."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._lock = threading.Lock()
        self._tail: JournalTail | None = None
        self._query = JournalQuery(events=(GATEWAY_EVENT, LANE_PASS_EVENT))
        self.gateway = GatewayTally()
        self.lane = LaneTally()

    def update(self) -> None:
        with self._lock:
            if self._tail is None:
                self._tail = JournalTail(self.home.journal)
                self._add(self._tail.history(self._query))
            else:
                self._add(self._tail.poll(self._query))

    def _add(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            if e.get("event") == GATEWAY_EVENT:
                self.gateway.add(e)
            else:
                self.lane.add(e)


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0
