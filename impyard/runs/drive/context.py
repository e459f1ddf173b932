"""What a run's pipeline needs from the process that hosts it (``impyard run`` or
``impyard serve``), and the hooks through which that process follows its runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from impyard.home import Home
from impyard.journal.log import Journal
from impyard.runs.records.model import Manifest
from impyard.settings import Settings


@dataclass
class RunContext:
    """What a pipeline needs from its host process."""

    settings: Settings
    journal: Journal
    #: Called with the manifest once the run is admitted and recorded, before it prepares
    #: (a foreground run names itself and starts showing its output here).
    on_admitted: Callable[[Manifest], None] | None = None
    # Called with the manifest after the box started (serve tracks running boxes).
    on_box_started: Callable[[Manifest], None] | None = None
    #: Called with the manifest once the box has exited, before the run's ending: serve
    #: counts a slot as a box, so the next task may start while this run is integrated.
    on_box_exited: Callable[[Manifest], None] | None = None
    #: Called with the manifest once the run's outcome is final and its lease released,
    #: before its box's removal and its space's release are waited for (a handed-over
    #: run's client is answered here).
    on_finished: Callable[[Manifest], None] | None = None
    #: Runs whose box the host killed (serve's shutdown): whatever their box's exit status,
    #: such a run is quarantined, never integrated half-done.
    killed_runs: set[str] = field(default_factory=set)
    #: Why a killed run was killed, where it is not serve's shutdown (a handed-over run's
    #: client that went away), by run id.
    kill_reasons: dict[str, str] = field(default_factory=dict)
    #: Makes the run of an admitted manifest (default: the pipeline's ``Run``, whose box
    #: runs on this host's engine; serve on a cluster makes runs whose box runs on a node).
    make_run: Callable[..., Any] | None = None
    #: Stops a run's box on the cluster node it runs on (serve on a cluster), by run id.
    kill_remote: Callable[[str], bool] | None = None
    #: Whether serve queues a finished run's task again: a run lost with its cluster node
    #: (not the task's fault), the first time its task lost one.
    requeue_lost: Callable[[Manifest], bool] | None = None

    def finished(self, manifest: Manifest) -> None:
        if self.on_finished is not None:
            self.on_finished(manifest)

    def kill_reason(self, run_id: str) -> str:
        """Why the host killed a run in ``killed_runs``: its own reason, else serve's shutdown."""
        return self.kill_reasons.get(run_id, "killed by the host (serve shutdown)")

    @property
    def home(self) -> Home:
        return Home(self.settings.home)
