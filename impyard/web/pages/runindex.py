"""Every run of the data root, kept up to date cheaply for the console's pages and
``/metrics``: a finished run's manifest never changes, so it is read once and its facts
kept by run directory name; each refresh lists ``runs/`` (names only) and reads only the
manifests of runs new since the last refresh or not yet finished. A run directory that
is gone (gc) leaves the index at the next refresh.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from impyard.home import Home
from impyard.runs.records.lookup import run_ids
from impyard.runs.records.model import TERMINAL_STATES


@dataclass(frozen=True)
class RunFacts:
    """What the console shows of a run in a listing, and what metrics count."""

    run_id: str
    imp: str
    state: str
    checkpoint: str
    mode: str | None
    task_id: str | None
    created_at: str | None
    started_at: str | None
    ended_at: str | None
    exit_code: int | None
    reason: str | None
    #: From the manifest's start to its end (None when either is missing).
    duration_seconds: float | None
    #: Seconds per pipeline phase, as the manifest's ``timings_ms`` records them.
    phases: Mapping[str, float] = field(default_factory=dict)
    #: The run claimed a ready box (``[box.warm]``) rather than starting its own.
    warm: bool = False
    #: The run looked for a ready box: with ``warm`` false, it found none (a miss).
    looked_warm: bool = False

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def since(self) -> str | None:
        return self.started_at or self.created_at


@dataclass(frozen=True)
class IndexView:
    """One refresh: every run id newest first, and the facts of each readable one."""

    ids: list[str]
    facts: dict[str, RunFacts]

    def unfinished(self) -> list[RunFacts]:
        return [f for f in (self.facts.get(i) for i in self.ids) if f and not f.finished]

    def newest_finished(self, count: int) -> list[RunFacts]:
        found: list[RunFacts] = []
        for run_id in self.ids:
            facts = self.facts.get(run_id)
            if facts is not None and facts.finished:
                found.append(facts)
                if len(found) == count:
                    break
        return found


class RunIndex:
    def __init__(self, home: Home) -> None:
        self.home = home
        self._lock = threading.Lock()
        self._finished: dict[str, RunFacts] = {}

    def refresh(self) -> IndexView:
        ids = run_ids(self.home)
        with self._lock:
            present = set(ids)
            for gone in [run_id for run_id in self._finished if run_id not in present]:
                del self._finished[gone]
            facts = dict(self._finished)
            for run_id in ids:
                if run_id in facts:
                    continue
                read = read_facts(self.home, run_id)
                if read is None:
                    continue  # a run being created has no manifest yet
                facts[run_id] = read
                if read.finished:
                    self._finished[run_id] = read
        return IndexView(ids, facts)


def read_facts(home: Home, run_id: str) -> RunFacts | None:
    """The run's facts from its manifest read as plain JSON (building the full model for
    thousands of runs is what made listings slow), or None when it is unreadable."""
    try:
        raw = json.loads(home.manifest(run_id).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    started, ended = _text(raw, "started_at"), _text(raw, "ended_at")
    timings = raw.get("timings_ms")
    phases = {
        str(name): float(ms) / 1000
        for name, ms in (timings.items() if isinstance(timings, dict) else ())
        if isinstance(ms, int | float)
    }
    exit_code = raw.get("exit_code")
    return RunFacts(
        run_id=run_id,
        imp=_text(raw, "imp") or "?",
        state=_text(raw, "state") or "?",
        checkpoint=_text(raw, "checkpoint") or "pending",
        mode=_text(raw, "mode"),
        task_id=_text(raw, "task_id"),
        created_at=_text(raw, "created_at"),
        started_at=started,
        ended_at=ended,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        reason=_text(raw, "reason") or _first_violation(raw),
        duration_seconds=_between(started, ended),
        phases=phases,
        warm=raw.get("warm") is True,
        looked_warm=raw.get("warm") is True or isinstance(raw.get("warm_pool"), str),
    )


def _first_violation(raw: dict[str, Any]) -> str | None:
    """A rejected run records no reason, only its violations: the first of them and how
    many more there were, as ``serve`` reports them (and, as there, none for a run that
    landed)."""
    if raw.get("checkpoint") == "integrated":
        return None
    found = raw.get("validation_errors")
    if not isinstance(found, list) or not found or not isinstance(found[0], dict):
        return None
    path, rule = _text(found[0], "path"), _text(found[0], "rule")
    total = raw.get("validation_errors_total")
    more = max(total if isinstance(total, int) else 0, len(found)) - 1
    return f"{path or '-'}: {rule or '?'}" + (f" (…and {more} more)" if more else "")


def _text(raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) else None


def _between(start: str | None, end: str | None) -> float | None:
    if start is None or end is None:
        return None
    try:
        seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
