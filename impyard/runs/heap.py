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
import logging
import threading

import impyard.libc

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
                libc: ctypes.CDLL | None = impyard.libc.libc()
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
