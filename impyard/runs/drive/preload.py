"""Load modules on a side thread while the main one waits on something else.

A foreground ``impyard run`` is a fresh process: the snapshot, validation and lane
modules a box's exit needs take tens of milliseconds of imports, while the engine
starts the box takes a hundred of the main thread's milliseconds spent waiting on a
socket. Imported there, they are ready when the box exits. Python's per-module import
locks make a module the main thread asks for meanwhile wait for the side thread's
import of it, never run it twice. A failure here changes nothing: the main thread's
own import then raises it where it is used.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterable


def warm_imports(modules: Iterable[str]) -> threading.Thread | None:
    """Import ``modules`` on a daemon thread; None when all are loaded already (serve)."""
    missing = [name for name in modules if name not in sys.modules]
    if not missing:
        return None

    def load() -> None:
        for name in missing:
            with contextlib.suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=load, name="warm-imports", daemon=True)
    thread.start()
    return thread
