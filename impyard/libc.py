"""The C library, loaded once and only by the code that calls into it.

``ctypes.CDLL(None)`` is the process's own symbol table, which holds libc's functions:
unlike ``ctypes.util.find_library("c")`` it starts no ``ldconfig -p`` process (a fork
and ~10 ms per command that imports the gateway).
"""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
