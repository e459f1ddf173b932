"""serve's gc: every ``retention.gc_interval_seconds`` on a thread of its own.

Beside the run loop, never in it: claiming tasks never waits for a gc. One tick at a
time (a tick still running when the next is due is skipped, and the data root's gc
lock keeps a command's gc out too). A gc that fails is logged and journaled as
``gc.failed`` and tried again at the next interval; it never takes serve down.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from impyard.home import Home
from impyard.journal.log import Journal
from impyard.policy.compile import deployed_org_policy
from impyard.policy.models import RetentionPolicy
from impyard.retention.apply import run_gc
from impyard.retention.model import GcBusyError, GcResult

log = logging.getLogger(__name__)


class PeriodicGc:
    def __init__(
        self,
        home: Home,
        journal: Journal,
        *,
        interval_seconds: float | None = None,
        gc: Callable[[], GcResult] | None = None,
        on_result: Callable[[GcResult], None] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        """``interval_seconds`` and ``gc`` default to the deployed policy's interval and a
        real gc (tests inject both)."""
        self.home = home
        self.journal = journal
        self._interval = interval_seconds
        self._gc = gc if gc is not None else lambda: run_gc(home, journal=journal)
        self._on_result = on_result
        self._on_error = on_error
        self._running = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def interval(self) -> float:
        if self._interval is not None:
            return self._interval
        # Read at every wait, so a deploy that changes it applies without a restart.
        return float(deployed_org_policy(self.home).retention.gc_interval_seconds)

    def tick(self) -> GcResult | None:
        """One gc now, unless one is already running; None when none ran or it failed."""
        if not self._running.acquire(blocking=False):
            return None
        try:
            result = self._gc()
        except GcBusyError as exc:  # an owner's `impyard gc` is at it: same work
            log.info("%s; skipping this round", exc)
            return None
        except Exception as exc:
            log.exception("gc failed")
            error = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(OSError):  # the journal may be what failed
                self.journal.record("gc.failed", error=error)
            if self._on_error is not None:
                self._on_error(f"gc failed: {error}")
            return None
        finally:
            self._running.release()
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception:  # a reporting fault is no reason to stop collecting
                log.exception("could not report a gc")
        return result

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="impyard-gc", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop ticking; wait (up to ``timeout``) for a gc in progress to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self._safe_interval()):
            self.tick()

    def _safe_interval(self) -> float:
        try:
            return max(self.interval(), 0.01)
        except Exception:  # an unreadable policy must not end the loop
            log.exception("could not read retention.gc_interval_seconds")
            return float(RetentionPolicy().gc_interval_seconds)
