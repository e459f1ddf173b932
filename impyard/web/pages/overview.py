"""The overview page's facts: the sections ``impyard status`` shows, gathered by the same
functions and judged by the same ``judge``, with the two slow parts made cheap for a page
that refreshes: the engine and its images are asked at most every ``ENGINE_TTL_SECONDS``,
and the disk section reports free space without walking the data root."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from impyard.home import Home
from impyard.knowledge.imps import list_imps
from impyard.settings import Settings
from impyard.status.collect import judged_status
from impyard.status.disk import MIN_FREE_RATIO, disk_section
from impyard.status.engine import DockerProbe, EngineProbe, engine_status, image_statuses
from impyard.status.images import named_images
from impyard.status.model import EngineStatus, ImageStatus, QueueSection, Status
from impyard.status.units import age_seconds
from impyard.status.work import queue_and_leases
from impyard.web.pages.runindex import IndexView, RunFacts, RunIndex

#: Seconds the engine's answer is reused (a stuck engine costs status seconds per ask).
ENGINE_TTL_SECONDS = 10.0
#: Finished runs the overview lists.
LAST_OUTCOMES = 50


class EngineCache:
    """The engine's status and the images the data root names, asked again only after
    ``ttl`` seconds; one caller asks while the others reuse the previous answer."""

    def __init__(self, probe: EngineProbe | None = None, ttl: float = ENGINE_TTL_SECONDS) -> None:
        self._probe = probe or DockerProbe()
        self._ttl = ttl
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._value: tuple[EngineStatus, list[ImageStatus]] | None = None

    def get(self, home: Home, imps: list[str]) -> tuple[EngineStatus, list[ImageStatus]]:
        with self._lock:
            if self._value is None or time.monotonic() - self._at > self._ttl:
                engine = engine_status(self._probe)
                images = image_statuses(self._probe, named_images(home, imps), engine.reachable)
                self._value, self._at = (engine, images), time.monotonic()
            return self._value


@dataclass(frozen=True)
class Running:
    facts: RunFacts
    age_seconds: float | None


@dataclass(frozen=True)
class Live:
    """The part of the overview a open page keeps current without a reload."""

    queue: QueueSection
    running: list[Running]
    outcomes: list[RunFacts]
    total_runs: int

    def signature(self) -> tuple[object, ...]:
        """Changes whenever what the page shows of it changes (elapsed times aside)."""
        return (
            tuple(sorted(self.queue.counts.items())),
            self.queue.error,
            tuple((r.facts.run_id, r.facts.state) for r in self.running),
            tuple(f.run_id for f in self.outcomes[:1]),
            self.total_runs,
        )


@dataclass(frozen=True)
class Overview:
    status: Status
    live: Live


def overview(home: Home, settings: Settings, engines: EngineCache, index: RunIndex) -> Overview:
    now = datetime.now(UTC)
    imps = list_imps(home)
    engine, images = engines.get(home, imps)
    view = index.refresh()
    # Free space only: the usage walk is `impyard status`'s (budgeted, but seconds).
    disk = disk_section(home.root, {}, min_free_ratio=MIN_FREE_RATIO, statvfs=os.statvfs)
    status = judged_status(home, settings, now, imps, engine, images, runs=[], disk=disk)
    return Overview(status, _live(status.queue, view, now))


def live(home: Home, settings: Settings, index: RunIndex) -> Live:
    """Only the live part: what the page's event stream checks every second."""
    now = datetime.now(UTC)
    queue, _ = queue_and_leases(home, settings.lease_ttl_seconds, now)
    return _live(queue, index.refresh(), now)


def _live(queue: QueueSection, view: IndexView, now: datetime) -> Live:
    running = [Running(f, age_seconds(f.since, now)) for f in reversed(view.unfinished())]
    return Live(queue, running, view.newest_finished(LAST_OUTCOMES), len(view.ids))
