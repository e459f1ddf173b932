"""The C library, loaded once and only by the code that calls into it.

``ctypes.CDLL(None)`` is the process's own symbol table, which holds libc's functions:
unlike ``ctypes.util.find_library("c")`` it starts no ``ldconfig -p`` process (a fork
and ~10 ms per command that imports the gateway).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def syscall(name: str, argtypes: tuple[Any, ...], *args: object) -> int:
    """Call libc's wrapper ``name`` of a system call that returns 0 or -1 (``setns``,
    ``mount``, ``umount2``): 0, or the errno it failed with."""
    if _prototype(name, argtypes)(*args) == 0:
        return 0
    return ctypes.get_errno()


@functools.cache
def _prototype(name: str, argtypes: tuple[Any, ...]) -> Any:
    # One foreign function per signature, typed once: the function object libc() hands
    # out for ``name`` is shared, so typing it on every call rewrote shared state.
    function = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes, use_errno=True)
    return function((name, libc()))
