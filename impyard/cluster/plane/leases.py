"""One remote run's lease: which node holds it, under which fencing token, what the node
fetches, the output as it arrives, and how it ended. A message about the run counts only
with the current token while the lease is live; a lease ends once (result or loss)."""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from impyard.box.watch.livelog import HeadTailWriter, KeptLog
from impyard.cluster.protocol import Assignment, BoxOrder, ExitReport, FileKind

LeaseState = Literal["placed", "taken", "started", "done", "lost"]


@dataclass
class Lease:
    run_id: str
    imp: str
    order: BoxOrder | None
    files: dict[FileKind, Path]
    log: HeadTailWriter
    node: str | None = None
    agent: str | None = None
    token: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    state: LeaseState = "placed"
    expires: float = 0.0
    container_id: str | None = None
    written: int = 0  # output bytes received, in order
    exit: ExitReport | None = None
    tree: Path | None = None
    lost: str | None = None
    kept_log: KeptLog | None = None
    kill: bool = False
    changed: threading.Condition = field(default_factory=threading.Condition)

    def assignment(self) -> Assignment:
        assert self.order is not None, "a lease taken back after a restart is never placed"
        return Assignment(run_id=self.run_id, imp=self.imp, token=self.token, box=self.order)

    @property
    def live(self) -> bool:
        return self.state in ("placed", "taken", "started")

    def holds(self, token: str) -> bool:
        return self.live and secrets.compare_digest(token.encode(), self.token.encode())

    def renew(self, lease_seconds: float) -> None:
        self.expires = time.monotonic() + lease_seconds

    def end(self, *, lost: str | None = None) -> None:
        """The lease's one ending (the caller holds ``changed``): the log closes with it."""
        self.state = "lost" if lost is not None else "done"
        self.lost = lost
        self.kept_log = self.log.close()
        self.changed.notify_all()
