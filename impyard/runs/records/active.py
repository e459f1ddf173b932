"""What a run's endings, its landing and its box's requests use of the run driving them.

``impyard.runs.drive.pipeline.Run`` is the one such run; crash recovery drives one too. The
modules that end a run or answer its box take this, so they never import the pipeline
that calls them.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any, Protocol

from impyard.home import Home
from impyard.knowledge.change import Checkpoint, KnowledgeLimits
from impyard.policy.models import EffectivePolicy
from impyard.runs.records.model import Manifest


class ActiveRun(Protocol):
    """One run being driven: its record, where it lives, and how it records a step."""

    @property
    def manifest(self) -> Manifest: ...

    @property
    def home(self) -> Home: ...

    @property
    def policy(self) -> EffectivePolicy: ...

    @property
    def limits(self) -> KnowledgeLimits:
        """The limits the run was admitted under."""
        ...

    @property
    def checkpoint_lock(self) -> threading.Lock:
        """One checkpoint at a time: a box's mid-run ones and the exit's."""
        ...

    @property
    def manifest_lock(self) -> threading.RLock:
        """Held while the manifest is changed and saved from more than one thread."""
        ...

    def save(self) -> None:
        """Write the manifest (atomically) as it is now."""

    def event(self, name: str, **fields: Any) -> None:
        """Journal one event of this run."""

    def phase(self, name: str) -> AbstractContextManager[None]:
        """Time a step into the manifest's ``timings_ms``."""

    def finish(self, checkpoint: Checkpoint, **outcome: Any) -> None:
        """Record the run's terminal state, then release what it holds."""
