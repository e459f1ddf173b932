"""What ``impyard serve`` reports as it works, as data: its live status and its events.

An event carries what one line of serve's output needs (the time, task, run, imp,
outcome and the first reason) and nothing formatted: reasons and paths can come from a
box, so they reach a terminal only through the CLI, which escapes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from impyard.runs.host.recovery import Resolution
from impyard.runs.records.model import Manifest

#: started: a task's box started (its run id known) | reattached: recovery found a box
#: still running | finished: a run ended with a checkpoint outcome | failed: a task ended
#: without one | requeued: a task went back to the queue | recovered: recovery resolved a
#: run | killed: shutdown kills a box | engine | stopping | gc | status: only the counts
#: changed.
EventKind = Literal[
    "started",
    "reattached",
    "finished",
    "failed",
    "requeued",
    "recovered",
    "killed",
    "engine",
    "stopping",
    "gc",
    "status",
]

#: Events about one task or run (the others say something about serve itself).
TASK_KINDS: frozenset[str] = frozenset(
    {"started", "reattached", "finished", "failed", "requeued", "recovered", "killed"}
)


@dataclass
class ServeStatus:
    """What the live summary shows; ``counts`` is keyed by checkpoint outcome."""

    running: int = 0
    queued: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    stopping: bool = False
    engine_down: bool = False
    #: What asked serve to stop (a signal's name); None while it runs, or when ``--once``
    #: ended it.
    stopped_by: str | None = None


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ServeEvent:
    kind: EventKind
    #: What an event about serve itself says; empty for task events, which the fields
    #: below describe.
    message: str = ""
    task_id: str | None = None
    run_id: str | None = None
    imp: str | None = None
    #: started | reattached | a checkpoint outcome | failed | waiting | killing
    outcome: str | None = None
    #: The commit an integrated run produced.
    commit: str | None = None
    #: The first reason: ``path: rule`` of a rejection's first violation, why a run was
    #: quarantined or conflicted, why a task failed or waits. Raw: it may be box-chosen.
    reason: str | None = None
    #: How many reasons there were beyond the first.
    more_reasons: int = 0
    #: How recovery found and resolved the run (``recovered`` events).
    recovery: str | None = None
    at: datetime = field(default_factory=_now)

    @property
    def about_a_task(self) -> bool:
        return self.kind in TASK_KINDS


Reporter = Callable[[ServeEvent, ServeStatus], None]


def first_reason(manifest: Manifest) -> tuple[str | None, int]:
    """The first reason a run ended as it did, and how many more there were."""
    errors = manifest.validation_errors
    if errors:
        first = errors[0]
        total = max(manifest.validation_errors_total or 0, len(errors))
        return f"{first.path or '-'}: {first.rule}", total - 1
    return manifest.reason, 0


def box_started(manifest: Manifest, *, reattached: bool = False) -> ServeEvent:
    kind: EventKind = "reattached" if reattached else "started"
    return ServeEvent(
        kind,
        task_id=manifest.task_id,
        run_id=manifest.run_id,
        imp=manifest.imp,
        outcome=kind,
    )


def run_finished(manifest: Manifest, kind: EventKind = "finished") -> ServeEvent:
    """A run at its terminal state: its outcome, commit and first reason."""
    reason, more = (None, 0) if manifest.checkpoint == "integrated" else first_reason(manifest)
    return ServeEvent(
        kind,
        task_id=manifest.task_id,
        run_id=manifest.run_id,
        imp=manifest.imp,
        outcome=manifest.checkpoint,
        commit=manifest.produced_commit,
        reason=reason,
        more_reasons=more,
    )


def recovered(resolution: Resolution, manifest: Manifest | None) -> ServeEvent:
    """A run recovery resolved; ``manifest`` (None: unreadable) adds its task and reason."""
    how = f"found {resolution.found_state}, {resolution.action}"
    if manifest is None:
        return ServeEvent(
            "recovered",
            run_id=resolution.run_id,
            imp=resolution.imp,
            outcome=resolution.checkpoint,
            recovery=how,
        )
    finished = run_finished(manifest, "recovered")
    return replace(finished, outcome=resolution.checkpoint, recovery=how)


def task_ended_without_run(
    task_id: str, imp: str, run_id: str | None, outcome: Literal["failed", "waiting"], why: str
) -> ServeEvent:
    """A task that failed (``run_id``: its run, if one was started) or waits in the queue."""
    kind: EventKind = "failed" if outcome == "failed" else "requeued"
    return ServeEvent(kind, task_id=task_id, run_id=run_id, imp=imp, outcome=outcome, reason=why)


def killing(manifest: Manifest) -> ServeEvent:
    return ServeEvent(
        "killed",
        task_id=manifest.task_id,
        run_id=manifest.run_id,
        imp=manifest.imp,
        outcome="killing its box",
        reason="shutdown",
    )
