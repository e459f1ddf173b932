"""A run's box once it has exited: its log kept and the box removed beside the run's ending.

A clean exit may be seen (``box.docker.taskexits``) before the engine has closed the
box's streams, so the log is kept on its own thread, overlapping the exit's record and
the checkpoint, as the box's removal does. Whoever follows the run reads its output to the
end of the log, so the run announces its end only once the log is whole (``log_kept``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from impyard.box.launcher.launch import keep_box_log, remove_box
from impyard.box.watch.logs import DRAIN_SECONDS, LogFollower
from impyard.runs.drive.beside import Beside


class BoxEnd:
    """The exited box's log and removal, once the run has waited for the box."""

    def __init__(self) -> None:
        self._log_kept = threading.Event()
        self._log_kept.set()  # no box has exited yet: nothing to keep

    def begin(
        self,
        container_id: str,
        log_path: Path,
        follower: LogFollower | None,
        drop_volume: Callable[[], None],
    ) -> Beside[None]:
        """Keep the log, then remove the box and drop its volume, on a thread of its own."""
        self._log_kept.clear()

        def end() -> None:
            try:
                keep_box_log(container_id, log_path, follower)
            finally:
                self._log_kept.set()
                remove_box(container_id)
                drop_volume()

        return Beside("box-teardown", end)

    def log_kept(self) -> None:
        """Wait until the exited box's log is whole (bounded as its follower is)."""
        self._log_kept.wait(DRAIN_SECONDS + 10)
