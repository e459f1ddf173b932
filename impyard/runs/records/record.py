"""How a run's steps record themselves: the manifest saved whole (atomically, under a lock:
the run's thread and its gateway's threads both change it), journal events tagged with the
run, and the time each phase took."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from impyard.home import Home
from impyard.journal.log import Journal
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest


class RunRecord:
    """The manifest and journal of one run, as its steps write them."""

    def __init__(self, home: Home, journal: Journal, manifest: Manifest) -> None:
        self.home = home
        self.journal = journal
        self.manifest = manifest
        #: The manifest is changed and saved from the run's thread and from a gateway thread.
        self.manifest_lock = threading.RLock()

    def save(self) -> None:
        with self.manifest_lock:
            manifests.write(self.home, self.manifest)

    def event(self, name: str, **fields: Any) -> None:
        self.journal.record(name, run=self.manifest.run_id, imp=self.manifest.imp, **fields)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            with self.manifest_lock:
                self.manifest.timings_ms[name] = round((time.monotonic() - start) * 1000, 1)
