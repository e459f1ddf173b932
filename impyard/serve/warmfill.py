"""Keeping the ready-box pools full: what ``serve`` (not ``--once``) does between runs.

Each imp whose runs use ready boxes left the shape of its last run in ``warm/wants``.
A pass refreshes each shape from the imp's deployed policy (a deploy that changed the
image, runtime, user or a limit makes a new shape), drops the imps whose policy keeps
none, removes every ready box no wanted pool owns, that outlived its pool's bound or
that died while it waited, and starts boxes until each pool holds its number.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from impyard.box.launcher.launch import resolve_image
from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.policy.compile import deployed_policy
from impyard.runs.ready import pool as warmpool
from impyard.runs.ready import prefill as warmprefill
from impyard.runs.ready.claim import POOL_CLAIMED, record_want, wants, wants_dir
from impyard.runs.ready.pool import PoolShape

log = logging.getLogger(__name__)

#: Seconds between two passes while nothing asks for one sooner.
FILL_INTERVAL_SECONDS = 1.0


@dataclass
class FillReport:
    #: pool key -> ready boxes wanted.
    wanted: dict[str, int] = field(default_factory=dict)
    started: int = 0
    drained: int = 0


def refreshed(home: Home, imp: str, shape: PoolShape) -> PoolShape | None:
    """``shape`` as the imp's deployed policy makes it now; None: it keeps no ready box."""
    policy = deployed_policy(home, imp)
    box = policy.box
    if box.warm.boxes <= 0:
        return None
    space = warmpool.space_bytes(policy.knowledge.max_repo_bytes) if shape.space_bytes else 0
    return replace(
        shape,
        image_id=resolve_image(shape.image),
        runtime=box.runtime,
        user=box.user,
        memory_bytes=box.memory_bytes,
        cpus=box.cpus,
        pids_limit=box.pids_limit,
        network=box.network,
        space_bytes=space,
    )


def fill_once(
    home: Home, stopping: threading.Event | None = None, reserve_bytes: int = 0
) -> FillReport:
    """One pass over every pool of this data root; a new box's space leaves
    ``reserve_bytes`` of the data root free (IMPYARD_DISK_RESERVE_BYTES)."""
    report = FillReport()
    shapes: dict[str, PoolShape] = {}
    max_age: dict[str, float] = {}
    #: pool key -> the imp whose checkout its new boxes hold (the last to ask for it).
    fill_for: dict[str, str] = {}
    for imp, shape in sorted(wants(home).items(), key=lambda item: want_age(home, item[0])):
        try:
            now = refreshed(home, imp, shape)
        except ImpyardError as exc:  # an image gone: nothing to start until it is back
            log.warning("ready boxes of imp %s: %s", imp, exc)
            continue
        if now is None:
            (wants_dir(home) / f"{imp}.json").unlink(missing_ok=True)
            continue
        if now != shape:
            record_want(home, imp, now)
        policy = deployed_policy(home, imp)
        warm = policy.box.warm
        shapes[now.key] = now
        if policy.knowledge.enabled:
            fill_for[now.key] = imp
        report.wanted[now.key] = max(report.wanted.get(now.key, 0), warm.boxes)
        max_age[now.key] = min(max_age.get(now.key, float("inf")), warm.max_age_seconds)
    unwanted = functools.partial(warmprefill.stale, home)
    report.drained = warmpool.drain(home, max_age, unwanted) + warmpool.sweep_abandoned(home)
    for key, count in report.wanted.items():
        missing = count - len(warmpool.ready_boxes(home, key))
        for _ in range(max(0, missing)):
            if stopping is not None and stopping.is_set():
                return report
            fill = None
            if key in fill_for:
                fill = functools.partial(
                    warmprefill.prefill, home, imp=fill_for[key], user=shapes[key].user
                )
            warmpool.start_pool_box(home, shapes[key], reserve_bytes, fill)
            report.started += 1
    return report


def want_age(home: Home, imp: str) -> float:
    """When the imp last asked for its shape (its want's mtime; 0 if gone)."""
    try:
        return (wants_dir(home) / f"{imp}.json").stat().st_mtime
    except OSError:
        return 0.0


def remove_pools(home: Home) -> int:
    """A clean stop: every ready box goes (a claimed one is its run's)."""
    return warmpool.drain(home, {})


class PoolKeeper:
    """The thread serve runs to keep its pools full; stopped with serve, pools removed."""

    def __init__(
        self, home: Home, reserve_bytes: int = 0, busy: Callable[[], bool] | None = None
    ) -> None:
        self.home = home
        self.reserve_bytes = reserve_bytes
        #: True while runs go or tasks wait: no pass then. A pass during a burst only took
        #: CPU from the runs (each task needs a box either way, and a ready box costs more
        #: to make than a cold one: its space, its gate; measured 0.6-0.7x the throughput
        #: of serve without pools at concurrency 4 and 8), and a box made while the run
        #: that took the last one starts slowed that run (a Pi run on a ready box took
        #: longer than a cold one). Filling while fewer runs went than the host has cores
        #: was no better: 1.35x bare docker at concurrency 1 against 1.49x, 1.03x against
        #: 1.19x at 4. Pools are for the next run after a pause.
        self.busy = busy
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="warm-pools", daemon=True)

    def start(self) -> None:
        warmpool.reap(self.home)  # what a serve that died left behind
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        POOL_CLAIMED.set()  # a keeper waiting for the next pass sees the stop at once
        self.thread.join(timeout=60)
        remove_pools(self.home)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            POOL_CLAIMED.clear()  # before the pass: a claim during it means another pass
            try:
                if self.busy is None or not self.busy():
                    fill_once(self.home, self.stopping, self.reserve_bytes)
            except Exception as exc:  # an engine hiccup: the next pass tries again
                log.warning("could not fill the ready-box pools: %s", exc)
            # The next pass: at once when a run here took a ready box, else after a while.
            POOL_CLAIMED.wait(FILL_INTERVAL_SECONDS)
