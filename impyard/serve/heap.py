"""glibc malloc settings for a long-lived ``serve``, and giving freed memory back.

Every run starts short-lived threads (gateway, log follower, tmp watch, beside-work),
and glibc gives threads their own malloc arenas, up to eight per core. A
long-lived allocation made on one of them (a cache entry, a parsed tree) pins the
arena's heap below it, so each of the many arenas grows by its own fragments and
none shrinks. Large buffers make it worse: once one is freed, glibc raises its mmap
threshold to that size, so later ones come from (and stay in) the heaps as well.
Over 1,000 one-note runs the heaps came to hold 14-27 MiB free beside 12-18 MiB in use.

Two arenas are plenty behind the interpreter lock, and a fixed mmap threshold keeps
big transient buffers out of the heaps (freed, they go straight back to the system).
``malloc_trim`` then returns what the heaps hold free in whole pages. Set through
``mallopt``, not ``MALLOC_ARENA_MAX`` in the environment, so that only this process
is affected (not the boxes and tools it starts). Elsewhere than glibc: nothing.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import threading
import time

import impyard.common.libc

log = logging.getLogger(__name__)

# <malloc.h>
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

ARENAS = 2
#: glibc's own starting threshold, kept instead of letting it grow up to 32 MiB.
MMAP_THRESHOLD = 128 * 1024

_libc: ctypes.CDLL | None = None
_loaded = False
_lock = threading.Lock()


def _glibc() -> ctypes.CDLL | None:
    global _libc, _loaded
    with _lock:
        if not _loaded:
            _loaded = True
            try:
                libc: ctypes.CDLL | None = impyard.common.libc.libc()
            except OSError:
                libc = None
            if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim"):
                libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
                libc.malloc_trim.argtypes = (ctypes.c_size_t,)
                _libc = libc
        return _libc


def configure() -> bool:
    """Limit the arenas and fix the mmap threshold; call before the run threads start.
    False when this is not glibc (or it refused)."""
    libc = _glibc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(_M_ARENA_MAX, ARENAS)) and bool(
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    )
    if not ok:
        log.warning("glibc refused the malloc settings; serve's heap may grow with its arenas")
    return ok


def trim() -> None:
    """Give the heaps' free pages back to the system (milliseconds with two arenas)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


#: How often, at most, serve collects cyclic garbage itself.
COLLECT_EVERY_SECONDS = 1.0


class CycleCollector:
    """Collects cyclic garbage soon after runs end, at most once per interval.

    A run's gateway, control and budget objects refer to one another, so they go only
    when the collector finds them; they live for the run's seconds, long enough to reach
    the oldest generation, which is collected rarely. Left to that, the garbage of
    hundreds of runs piled up between collections, and each pile raised the high-water
    mark of the heaps. A full collection here traverses only what is not frozen (see
    ``cli.entry``): milliseconds."""

    def __init__(self, every_seconds: float = COLLECT_EVERY_SECONDS) -> None:
        self._every = every_seconds
        self._last = time.monotonic()

    def after_runs_ended(self) -> bool:
        """Collect if the last collection is ``every_seconds`` old; True when it did."""
        now = time.monotonic()
        if now - self._last < self._every:
            return False
        self._last = now
        gc.collect()
        return True
