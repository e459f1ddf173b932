"""The lines ``impyard serve`` prints: one as it starts, one per event, one as it stops.

Each begins with the UTC time and is one line whatever it quotes: a path or a reason a
box chose goes through ``one_line``, so nothing a box wrote can move the cursor, clear
the screen or forge a line of its own in the owner's terminal or in ``journalctl``.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from queue import SimpleQueue
from typing import TextIO

from impyard.cli.shared._wrap import terminal_width, wrap_words
from impyard.common.textsafe import one_line
from impyard.serve.events import ServeEvent, ServeStatus
from impyard.status.model import PolicySection
from impyard.status.serve_start import ServeStart

#: Characters kept of a reason (a path can be 4,096 bytes long), of a message about serve
#: itself, and of a name or id (host-made; bounded all the same).
REASON_LIMIT = 300
MESSAGE_LIMIT = 500
NAME_LIMIT = 80
#: Erases the terminal's current line (the live status) before a line is written over it.
ERASE = "\r\033[K"
#: How far a line's folded rest is indented on a terminal: past it, the next line begins.
HANGING = 4
#: Characters of a produced commit shown (as `git log --oneline` abbreviates, and more).
SHORT_COMMIT = 12


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _name(value: str | None) -> str:
    return one_line(value, NAME_LIMIT) if value else "-"


def _policy(policy: PolicySection) -> str:
    if policy.digest is None:
        return "not deployed"
    if policy.deployed:
        return policy.digest[:SHORT_COMMIT]
    changes = one_line("; ".join(policy.changes), REASON_LIMIT)
    return f"{policy.digest[:SHORT_COMMIT]} (undeployed: {changes})"


def start_line(start: ServeStart, at: datetime) -> str:
    engine = start.engine
    if engine.reachable:
        found = one_line(engine.version or "of unknown version", NAME_LIMIT)
    else:
        found = "down: " + one_line(engine.error or "unreachable", REASON_LIMIT)
    return (
        f"{stamp(at)} impyard serve: data root {one_line(start.home, MESSAGE_LIMIT)}, "
        f"concurrency {start.concurrency}{', --once' if start.once else ''}, "
        f"imps: {', '.join(_name(imp) for imp in start.imps) or 'none'}, "
        f"policy {_policy(start.policy)}, engine {found}"
    )


def event_line(event: ServeEvent) -> str | None:
    """The event's line; None for an event that only changes the live status."""
    if event.kind == "status":
        return None
    if not event.about_a_task:
        return f"{stamp(event.at)} {one_line(event.message, MESSAGE_LIMIT)}"
    line = (
        f"{stamp(event.at)} task {_name(event.task_id)} run {_name(event.run_id)} "
        f"{_name(event.imp)}: {_name(event.outcome)}"
    )
    if event.commit:
        line += f" {_name(event.commit[:SHORT_COMMIT])}"
    if event.reason:
        line += f": {one_line(event.reason, REASON_LIMIT)}"
    if event.more_reasons:
        line += f" (…and {event.more_reasons} more)"
    if event.recovery:
        line += f" (recovered: {_name(event.recovery)})"
    return line


def counts(status: ServeStatus) -> str:
    c = status.counts
    return (
        f"queued {status.queued}  landed {c['integrated']}  empty {c['empty']}"
        f"  rejected {c['rejected']}  conflict {c['conflict']}"
        f"  quarantined {c['quarantined']}  failed {c['failed']}"
    )


def live_status(status: ServeStatus, width: int | None = None) -> str:
    """The status line a terminal shows (redrawn in place), never written to a log.

    It must fit one row of ``width``: a status the terminal folded would leave its first
    rows behind when the next line erases it. Too wide, it drops the counts that are 0 and
    its double spaces; only then is it cut, between words.
    """
    line = (
        f"running {status.running}  {counts(status)}"
        + ("  (stopping)" if status.stopping else "")
        + ("  (engine down)" if status.engine_down else "")
    )
    if width is None or len(line) < width:
        return line
    c = status.counts
    parts = [f"running {status.running}", f"queued {status.queued}"]
    parts += [
        f"{label} {c[key]}"
        for label, key in (("landed", "integrated"), *((k, k) for k in _OTHER_COUNTS))
        if c[key]
    ]
    flags = (("(stopping)", status.stopping), ("(engine down)", status.engine_down))
    parts += [flag for flag, on in flags if on]
    return wrap_words(" ".join(parts), width - 1)[0]


_OTHER_COUNTS = ("empty", "rejected", "conflict", "quarantined", "failed")


def stop_line(status: ServeStatus, at: datetime) -> str:
    if status.stopped_by is not None:
        why = f"stopped by {one_line(status.stopped_by, NAME_LIMIT)}"
    elif status.queued:
        why = "stopped (--once): nothing more it can claim now"
    else:
        why = "stopped (--once): queue drained"
    return f"{stamp(at)} impyard serve: {why}: {counts(status)}"


class LineWriter:
    """Writes serve's lines from one thread, in order, flushing after each.

    Run threads, gc and the signal handler only queue a line: ``SimpleQueue.put`` is safe
    in a signal handler, where writing to stdout could re-enter the very write the signal
    interrupted (a RuntimeError from the buffered writer). On a terminal each line first
    erases the live status line and then draws it again below.
    """

    def __init__(self, out: TextIO, tty: bool) -> None:
        self._out = out
        self._tty = tty
        self._queue: SimpleQueue[tuple[str | None, str | None] | None] = SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="impyard-serve-lines", daemon=True)
        self._thread.start()

    def put(self, line: str | None, status: ServeStatus | None = None) -> None:
        """Queue ``line`` (None: none) and, on a terminal, the live status after it.

        On a terminal a line longer than its width folds between words, the rest indented;
        in a pipe (``journalctl``, a log file) each line stays one line, as grep reads it.
        """
        width = terminal_width() if self._tty else None
        live = live_status(status, width) if self._tty and status is not None else None
        if line is not None and width is not None:
            line = "\n".join(wrap_words(line, width, indent=HANGING))
        if line is not None or live is not None:
            self._queue.put((line, live))

    def close(self) -> None:
        """Write what is queued, then stop the writing thread."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        broken = False
        while (item := self._queue.get()) is not None:
            line, live = item
            text = (ERASE if self._tty else "") + (line + "\n" if line is not None else "")
            if broken:
                continue  # nobody reads: drop the lines, never stop serve for them
            try:
                self._out.write(text + (live or ""))
                self._out.flush()
            except (OSError, ValueError):
                broken = True
