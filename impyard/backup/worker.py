"""The per-process background pusher behind ``notify``.

One daemon thread and a queue keyed by (data root, imp): a notify for an imp already
waiting is the same push, so a burst of a hundred integrations costs one push (plus
one more if they arrive while its push is running: that push may have read the refs
before the last of them). Nothing here can block or fail the caller.

Process exit: ``drain`` waits up to ``EXIT_FLUSH_SECONDS`` for what is queued,
retrying nothing more, so a short-lived ``impyard run`` (which drains before it
exits, and an ``atexit`` hook for every other process) leaves with its push done
or abandoned (status.json says which; the next notify pushes again). A
long-lived ``serve`` keeps the thread, and ``watch`` has it re-push failing imps.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time

from impyard.home import Home

log = logging.getLogger(__name__)

EXIT_FLUSH_SECONDS = 30.0
#: How often a watched data root's failing imps are pushed again (serve).
RETRY_FAILING_SECONDS = 300.0

_Key = tuple[str, str]  # (data root, imp)


class Worker:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[_Key, Home] = {}
        self._active: _Key | None = None
        self._thread: threading.Thread | None = None
        self._watched: dict[str, Home] = {}
        self._next_retry = 0.0
        #: Set at process exit: finish the push in flight, start no retry.
        self.abandon = threading.Event()
        #: Rounds of pushes done (one per imp taken from the queue); tests count them.
        self.rounds = 0

    def notify(self, home: Home, imp: str) -> None:
        with self._cond:
            self._pending[(str(home.root), imp)] = home
            self._start()
            self._cond.notify_all()

    def watch(self, home: Home) -> None:
        """Push every imp of ``home`` now, and its failing ones again every while."""
        from impyard.knowledge.imps import list_imps

        with self._cond:
            self._watched[str(home.root)] = home
        for imp in list_imps(home):
            self.notify(home, imp)

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is queued or pushing; False when ``timeout`` ran out first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._active is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def drain(self, timeout: float) -> bool:
        """For a process about to exit: wait for what is queued, retrying nothing more."""
        self.abandon.set()
        done = self.flush(timeout)
        if done:  # a push still in flight keeps the abandon: it must not start retrying
            self.abandon.clear()
        return done

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        if self._thread is None:
            atexit.register(self._at_exit)
        self._thread = threading.Thread(target=self._loop, name="impyard-backup", daemon=True)
        self._thread.start()

    def _at_exit(self) -> None:
        if not self.drain(EXIT_FLUSH_SECONDS):
            log.warning("backup: gave up waiting for queued pushes at exit")

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._queue_failing()
                    if self._pending:
                        break
                    self._cond.wait(self._idle_wait())
                key = next(iter(self._pending))
                home = self._pending.pop(key)
                self._active = key
            try:
                from impyard.backup.sync import backup_imp

                backup_imp(home, key[1], abandon=self.abandon)
            except Exception:  # a backup never takes the worker down with it
                log.exception("backup of imp %s failed", key[1])
            finally:
                with self._cond:
                    self._active = None
                    self.rounds += 1
                    self._cond.notify_all()

    def _idle_wait(self) -> float | None:
        if not self._watched:
            return None
        return max(0.0, self._next_retry - time.monotonic())

    def _queue_failing(self) -> None:
        """Under the lock: queue the failing imps of watched data roots when it is time."""
        if not self._watched or time.monotonic() < self._next_retry:
            return
        self._next_retry = time.monotonic() + RETRY_FAILING_SECONDS
        from impyard.backup.status import read_status

        for root, home in self._watched.items():
            try:
                found = read_status(home)
            except Exception:
                continue
            for imp, remotes in found.items():
                if any(entry.failing for entry in remotes.values()):
                    self._pending.setdefault((root, imp), home)


_worker = Worker()


def worker() -> Worker:
    return _worker


def notify(home: Home, imp: str) -> None:
    """Queue a push of ``imp`` to every backup remote and return at once; never raises."""
    try:
        _worker.notify(home, imp)
    except Exception:  # the caller is an integration that already happened
        log.exception("could not queue a backup of imp %s", imp)


def flush(timeout: float = EXIT_FLUSH_SECONDS) -> bool:
    """Wait for queued pushes (at most ``timeout`` seconds); False when some are left."""
    return _worker.flush(timeout)


def drain(timeout: float = EXIT_FLUSH_SECONDS) -> bool:
    """Before a short-lived process exits: finish queued pushes (one more attempt each, no
    retries) for at most ``timeout`` seconds; False when some were abandoned."""
    return _worker.drain(timeout)


def watch(home: Home) -> None:
    """For long-lived processes: back up every imp now, and failing ones periodically."""
    try:
        _worker.watch(home)
    except Exception:
        log.exception("could not start watching backups of %s", home.root)
